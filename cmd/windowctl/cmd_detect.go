package main

import (
	"context"
	"fmt"
	"strings"
)

var detectCmd = &command{
	name:    "detect",
	summary: "the server's backend, and why",
	details: "Connects, detects the best backend the server offers (or checks the one\n" +
		"--backend forces) and prints it with the server's name, version and modules.",
	json:  `{"backend":"nativehash-plain","field_ttl":false,"server":"redis","version":"7.0.15","modules":[],"reason":"…"}`,
	setup: noArgs("detect", func(ctx context.Context, c *cli) error { return c.detect(ctx) }),
}

func (c *cli) detect(ctx context.Context) error {
	d := c.st.Detection()
	o := detectOut{d.Backend, d.FieldTTL, d.Server, d.Version, d.Modules, d.Reason}
	if o.Modules == nil {
		o.Modules = []string{}
	}
	mods := "none"
	if len(o.Modules) > 0 {
		mods = strings.Join(o.Modules, ", ")
	}
	return c.p.emit(o, fmt.Sprintf("backend:   %s\nfield TTL: %v\nserver:    %s %s\nmodules:   %s\nwhy:       %s",
		o.Backend, o.FieldTTL, o.Server, o.Version, mods, o.Reason))
}
