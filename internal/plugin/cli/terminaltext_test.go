package cli

import "testing"

func TestTerminalText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain text, ✓ and tabs\tand\nlines", "plain text, ✓ and tabs\tand\nlines"},
		{"\x1b[1;31mbold red\x1b[0m", "\x1b[1;31mbold red\x1b[0m"},
		{"\x1b[2Jcleared", `\u001b[2Jcleared`},
		// Colours that hide text: concealed, black on black.
		{"\x1b[8mhidden\x1b[0m", `\u001b[8mhidden` + "\x1b[0m"},
		{"\x1b[30;40mhidden", `\u001b[30;40mhidden`},
		{"\x1b]52;c;cGF3bmVk\x07", `\u001b]52;c;cGF3bmVk\u0007`},
		{"over\rwritten", `over\u000dwritten`},
		{"c1 \u009b", `c1 \u009b`},
		{"bad \xff utf-8", `bad \xff utf-8`},
		{"\x1b[", `\u001b[`},
	} {
		if got := TerminalText(tt.in); got != tt.want {
			t.Errorf("TerminalText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
