package plugin

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/cobra"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// run runs the plugin with args, as kubectl runs it, and returns its
// stdout.
func run(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	var out bytes.Buffer
	cmd := NewCommand(cli.Streams{Out: &out, ErrOut: io.Discard})
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), err
}

// TestEveryCommandHasExamples walks the command tree: the --help of each
// command, the plugin's own and those that only group others (explain)
// included, has an Examples section, of that very command.
func TestEveryCommandHasExamples(t *testing.T) {
	var commands []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		// cobra's help command is not the plugin's.
		if !cmd.Hidden && cmd.Name() != "help" {
			commands = append(commands, cmd)
		}
		for _, child := range cmd.Commands() {
			walk(child)
		}
	}
	walk(NewCommand(cli.Streams{}))
	if len(commands) < len(wantCommands) {
		t.Fatalf("found %d commands, want at least %d", len(commands), len(wantCommands))
	}
	for _, cmd := range commands {
		path := strings.Fields(cmd.CommandPath())[2:] // without "kubectl capi-autoscaler"
		stdout, err := run(t, append(path, "--help")...)
		if err != nil {
			t.Errorf("%s --help: %v", cmd.CommandPath(), err)
			continue
		}
		_, examples, found := strings.Cut(stdout, "\nExamples:\n")
		if !found {
			t.Errorf("`%s --help` has no Examples section: give the command an Example", cmd.CommandPath())
			continue
		}
		// The section ends where the subcommands or the flags start.
		examples, _, _ = strings.Cut(examples, "\nAvailable Commands:\n")
		examples, _, _ = strings.Cut(examples, "\nFlags:\n")
		examples, _, _ = strings.Cut(examples, "\nGlobal Flags:\n")
		if !strings.Contains(examples, cmd.CommandPath()+" ") && !strings.Contains(examples, cmd.CommandPath()+"\n") {
			t.Errorf("the examples of %s do not run it:\n%s", cmd.CommandPath(), examples)
		}
	}
}

// wantCommands are the plugin's commands.
var wantCommands = []string{"compare", "completion", "convert", "explain", "status", "top", "version"}

func TestCompletionScriptsHaveTheCommands(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			g := NewWithT(t)
			stdout, err := run(t, "completion", shell)
			g.Expect(err).NotTo(HaveOccurred())
			// The scripts complete the binary kubectl runs, by asking it
			// (__complete): the commands are in its answers, and named in
			// fish's and zsh's descriptions.
			g.Expect(stdout).To(ContainSubstring("kubectl-capi_autoscaler"))
			g.Expect(stdout).To(ContainSubstring("__complete"))
			switch shell {
			case "bash":
				g.Expect(stdout).To(ContainSubstring("complete -o default -F __start_kubectl-capi_autoscaler kubectl-capi_autoscaler"))
			case "zsh":
				g.Expect(stdout).To(HavePrefix("#compdef kubectl-capi_autoscaler"))
			case "fish":
				g.Expect(stdout).To(ContainSubstring("complete -c kubectl-capi_autoscaler"))
			}
		})
	}
	_, err := run(t, "completion", "powershell")
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring(`invalid argument "powershell"`)))
}

// TestCompleteCandidates asks the plugin what kubectl's completion and the
// scripts ask it: the candidates for the last, partial, word.
func TestCompleteCandidates(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- {name: management, cluster: {server: "https://127.0.0.1:6443"}}
contexts:
- {name: management, context: {cluster: management, user: admin}}
- {name: prod, context: {cluster: management, user: admin}}
users:
- {name: admin, user: {token: secret}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{args: []string{""}, want: []string{"compare", "completion", "convert", "explain", "help", "status", "top", "version"}},
		{args: []string{"st"}, want: []string{"status"}},
		{args: []string{"co"}, want: []string{"compare", "completion", "convert"}},
		{args: []string{"explain", ""}, want: []string{"node", "pod"}},
		{args: []string{"completion", ""}, want: []string{"bash", "fish", "zsh"}},
		{args: []string{"completion", "z"}, want: []string{"zsh"}},
		{args: []string{"status", "--color", ""}, want: []string{"always", "auto", "never"}},
		{args: []string{"status", "-o", ""}, want: []string{"json", "yaml"}},
		{args: []string{"--kubeconfig", kubeconfig, "top", "--context", ""}, want: []string{"management", "prod"}},
	} {
		t.Run(strings.ReplaceAll(strings.Join(tt.args, " "), kubeconfig, "FILE"), func(t *testing.T) {
			stdout, err := run(t, append([]string{cobra.ShellCompRequestCmd}, tt.args...)...)
			g := NewWithT(t)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(candidates(stdout)).To(Equal(tt.want))
		})
	}
}

// candidates are the names __complete printed, before its directive.
func candidates(stdout string) []string {
	var names []string
	for line := range strings.Lines(stdout) {
		if strings.HasPrefix(line, ":") {
			break
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func TestVersionIsTheRelease(t *testing.T) {
	g := NewWithT(t)
	released := version
	t.Cleanup(func() { version = released })

	version = "v1.2.3"
	stdout, err := run(t, "version")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(stdout)).To(HaveExactElements("kubectl-capi_autoscaler", "v1.2.3", Not(BeEmpty()), Not(BeEmpty())))

	// Unreleased, it is the module's version the go command stamped,
	// "(devel)" in a test.
	version = ""
	info, ok := debug.ReadBuildInfo()
	g.Expect(ok).To(BeTrue())
	stdout, err = run(t, "version")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(stdout)[1]).To(Equal(info.Main.Version))
}
