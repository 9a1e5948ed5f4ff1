package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

var versionCmd = &command{
	name:    "version",
	summary: "print the version of windowctl and of Go",
	details: "Prints the module's version (a release tag, a pseudo-version of the commit it\n" +
		"was built from, or (devel)), the Go version and the platform. Same as --version.",
	json:  `{"module":"…","version":"(devel)","go":"go1.x","os":"linux","arch":"amd64","commit":"…","dirty":bool}`,
	local: true,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		return func(pos []string) (action, error) {
			if len(pos) != 0 {
				return nil, noArgsError("version")
			}
			return func(e *env) error { return printVersion(e.p) }, nil
		}
	},
}

// version describes this build: the main module's version ("(devel)" when
// the build has none), the Go version and the platform, and the commit when
// the build recorded one.
func version() versionOut {
	v := versionOut{Module: "github.com/windowstore/windowstore", Version: "(devel)",
		Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Dirty = s.Value == "true"
		}
	}
	return v
}

func printVersion(p *printer) error {
	v := version()
	text := fmt.Sprintf("windowctl version %s, built with %s for %s/%s", v.Version, v.Go, v.OS, v.Arch)
	if v.Commit != "" {
		text += " from commit " + v.Commit
		if v.Dirty {
			text += " (modified)"
		}
	}
	return p.emit(v, text)
}
