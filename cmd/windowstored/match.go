package main

import (
	"strings"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match finds the rule of a request's descriptor, as envoyproxy/ratelimit
// does: its entries walk the domain's tree, each entry matching a child named
// "key_value", else a wildcard child ("key_prefix*", '*' anywhere), else a
// child named "key" (any value). The rule is that of the node the last entry
// reaches; a descriptor that stops short of a rule, or goes deeper than the
// tree, has none.
func (n *node) match(entries []*ratelimitpb.RateLimitDescriptor_Entry) *rule {
	var found *rule
	for i, e := range entries {
		full := e.GetKey() + "_" + e.GetValue()
		next := n.children[full]
		if next == nil {
			for _, w := range n.wild {
				if w.matches(full) {
					next = n.children[w.key]
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.GetKey()]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			found = next.rule
		}
		n = next
	}
	return found
}

// matches reports whether s matches the pattern: its parts in order, the first
// at the start and the last at the end, each '*' standing for any run of
// characters.
func (w wildcard) matches(s string) bool {
	p := w.parts
	if !strings.HasPrefix(s, p[0]) {
		return false
	}
	s = s[len(p[0]):]
	last := p[len(p)-1]
	if len(s) < len(last) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[:len(s)-len(last)]
	for _, mid := range p[1 : len(p)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return true
}

// counterKey is the key of a descriptor's counter: the domain and every entry,
// each part escaped, so that no two descriptors share a counter. The store
// escapes it again, for Redis, and gives it its own hash tag.
func counterKey(domain string, entries []*ratelimitpb.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	esc := func(s string) {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c == '\\' || c == '|' || c == '=' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
	}
	esc(domain)
	for _, e := range entries {
		b.WriteByte('|')
		esc(e.GetKey())
		b.WriteByte('=')
		esc(e.GetValue())
	}
	return b.String()
}
