package main

import (
	"encoding/json"
	"fmt"
	"io"
)

// printer writes a command's results on stdout: text for people, or with
// --json one JSON object per line.
type printer struct {
	w    io.Writer
	json bool
}

// emit prints v as one line of JSON, or text as it is.
func (p *printer) emit(v any, text string) error {
	if p.json {
		return p.jsonLine(v)
	}
	_, err := fmt.Fprintln(p.w, text)
	return err
}

// jsonLine prints v as one line of JSON.
func (p *printer) jsonLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

// The JSON shapes. Each command's help names the one it prints.

type detectOut struct {
	Backend  string   `json:"backend"`
	FieldTTL bool     `json:"field_ttl"`
	Server   string   `json:"server"`
	Version  string   `json:"version"`
	Modules  []string `json:"modules"`
	Reason   string   `json:"reason"`
}

// sumOut is add's answer, and sum's for each key: the sum, or why the key
// failed. Duplicate is add's with --id or --at.
type sumOut struct {
	Key       string `json:"key"`
	Sum       *int64 `json:"sum,omitempty"`
	Duplicate *bool  `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

type allowOut struct {
	Key          string      `json:"key"`
	Allowed      bool        `json:"allowed"`
	Sum          int64       `json:"sum"`
	Remaining    int64       `json:"remaining"`
	RetryAfterMs int64       `json:"retry_after_ms"`
	Policies     []policyOut `json:"policies,omitempty"`
}

// policiesOut is allow's answer with --policy.
type policiesOut struct {
	Allowed      bool        `json:"allowed"`
	RetryAfterMs int64       `json:"retry_after_ms"`
	Policies     []policyOut `json:"policies"`
}

// policyOut is one policy of an allow with --limit N/WINDOW or --policy
// (which has a key).
type policyOut struct {
	Key          string `json:"key,omitempty"`
	Limit        int64  `json:"limit"`
	WindowMs     int64  `json:"window_ms"`
	Sum          int64  `json:"sum"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

// distinctOut is distinct's answer for each key.
type distinctOut struct {
	Key      string `json:"key"`
	Distinct *int64 `json:"distinct,omitempty"`
	Error    string `json:"error,omitempty"`
}

type bucketOut struct {
	Field string `json:"field"`
	Start string `json:"start"`
	Value int64  `json:"value"`
	TTLMs int64  `json:"ttl_ms"`
}

type inspectOut struct {
	Key      string            `json:"key"`
	RedisKey string            `json:"redis_key"`
	Head     string            `json:"head,omitempty"`
	Backend  string            `json:"backend"`
	Buckets  []bucketOut       `json:"buckets"`
	Meta     map[string]string `json:"meta"`
}

// demoRow is one row of the demo's table.
type demoRow struct {
	TimeS    int    `json:"time_s"`
	Event    string `json:"event"`
	Sum      int64  `json:"sum"`
	Decision string `json:"decision"`
}

type versionOut struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Commit  string `json:"commit,omitempty"`
	Dirty   bool   `json:"dirty,omitempty"`
}
