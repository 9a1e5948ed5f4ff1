package store

import (
	"strings"
	"time"
)

// At returns a view of the store whose operations happen at instant t on the
// client's clock, instead of the store's clock (the server's, unless
// WithClientClock): for backfills, replays and tests, as AllowN(t, n) is in
// golang.org/x/time/rate. Buckets are those of t; a limit decides at t.
//
//	st.At(t).Add(ctx, "login:42", 1)
//	st.At(t).Sum(ctx, "login:42")
//
// The view shares everything else with the store, and is as cheap to make as
// a struct copy; it is safe for concurrent use.
func (s *Store) At(t time.Time) *Store {
	v := *s
	v.at = &t
	return &v
}

// Over returns a view of the store that reads and limits the last d instead
// of the whole Window, from the tier that answers it exactly (see WithTiers):
// the finest one whose window reaches d and whose bucket divides d. With 10 s
// buckets for 10 minutes, 1 min for an hour and 1 h for a day, Over(30 *
// time.Minute).Sum reads the hour tier's last 30 buckets. Sum, SumMany,
// and ReadStat and ReadStatMany of StatDistinct read that span; Allow, Record with a
// Limit, and AllowAll limit the tier whose window is exactly d. Writes
// without a limit count in every tier, as on the store. When no tier
// answers d, the view's calls fail with ErrInvalid.
func (s *Store) Over(d time.Duration) *Store {
	v := *s
	v.over = d
	if d == s.win.Length {
		v.over = 0
	}
	return &v
}

// overTier is the index of the tier whose window is the Over view's span:
// the one a limit limits. 0 for the store itself.
func (s *Store) overTier() (int, error) {
	if s.over == 0 {
		return 0, nil
	}
	var ws []string
	for i, t := range s.tiers {
		if t.win.Length == s.over {
			return i, nil
		}
		ws = append(ws, t.win.String())
	}
	return 0, errOver{"no window of the store (" + strings.Join(ws, ", ") + ") is " + s.over.String() + " long: a limit needs a whole window"}
}

type errOver struct{ s string }

func (e errOver) Error() string { return e.s }
