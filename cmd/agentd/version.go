package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/agentd/agentd/record"
	"github.com/urfave/cli/v2"
)

// version and commit are set at link time by the Makefile
// (-ldflags "-X main.version=... -X main.commit=..."); otherwise they come
// from the build information (module version, vcs.revision when the build
// recorded it), else "dev" and unknown.
var (
	version = ""
	commit  = ""
)

// versionInfo is what `agentd version` prints.
type versionInfo struct {
	Version         string `json:"version"`
	Commit          string `json:"commit,omitempty"`
	CommitTime      string `json:"commit_time,omitempty"`
	Modified        bool   `json:"modified,omitempty"`
	GoVersion       string `json:"go_version"`
	Platform        string `json:"platform"`
	ProtocolVersion string `json:"protocol_version"`
}

func buildVersion() versionInfo {
	v := versionInfo{
		Version:         version,
		Commit:          commit,
		GoVersion:       runtime.Version(),
		Platform:        runtime.GOOS + "/" + runtime.GOARCH,
		ProtocolVersion: record.ProtocolVersion,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, commit, Go version and protocol version",
		Description: "Prints agentd's version, the commit it was built from (when the build\n" +
			"recorded it), the Go toolchain and the agent-discovery protocol version it speaks.",
		Flags: withGlobal(&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("version takes no arguments")
			}
			v := buildVersion()
			if c.Bool(flagJSON) {
				return json.NewEncoder(c.App.Writer).Encode(v)
			}
			var out strings.Builder
			w := &out
			fmt.Fprintf(w, "agentd %s\n", v.Version)
			if v.Commit != "" {
				mod := ""
				if v.Modified {
					mod = " (modified)"
				}
				when := ""
				if v.CommitTime != "" {
					when = " " + v.CommitTime
				}
				fmt.Fprintf(w, "commit:   %s%s%s\n", v.Commit, mod, when)
			} else {
				fmt.Fprintf(w, "commit:   unknown (not recorded in this build)\n")
			}
			fmt.Fprintf(w, "go:       %s %s\n", v.GoVersion, v.Platform)
			fmt.Fprintf(w, "protocol: %s\n", v.ProtocolVersion)
			return emit(c.App.Writer, &out)
		},
	}
}
