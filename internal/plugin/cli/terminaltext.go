package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// TerminalText is text as it may reach a terminal: what the plugin prints
// holds strings that the clusters supply (condition and event messages,
// annotation values, names), and whoever writes them must not move the
// cursor, clear the screen, set the title or the clipboard, or hide a
// line on the operator's terminal. The Palette's colours (SGR: ESC [
// digits m, paletteCodes), newlines and tabs are kept; every other control
// character, and invalid UTF-8, is shown escaped instead.
func TerminalText(s string) string {
	if isPlain(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if n := sgrLength(s[i:]); n > 0 {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isPlain says whether s needs no change: the common case, checked cheaply.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\n' && c != '\t' || c == 0x7f || c >= 0x80 {
			return false
		}
	}
	return true
}

// isControl tells the control characters that are not kept: C0 but
// newline and tab, DEL, and C1.
func isControl(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r < 0xa0
}

// paletteCodes are the SGR parameters the Palette writes, and reset: the
// only ones kept. Others may hide text (8 conceals it, a background may
// match the foreground), and a cluster's text can hold them as well.
var paletteCodes = map[string]bool{"": true, "0": true, "1": true, "2": true, "31": true, "32": true, "33": true, "36": true}

// sgrLength is the length of the colour sequence s starts with, or 0 when
// it starts with none, or with one that sets more than paletteCodes.
func sgrLength(s string) int {
	if len(s) < 3 || s[0] != '\x1b' || s[1] != '[' {
		return 0
	}
	end := strings.IndexByte(s, 'm')
	if end < 0 {
		return 0
	}
	for _, code := range strings.Split(s[2:end], ";") {
		if !paletteCodes[code] {
			return 0
		}
	}
	return end + 1
}

// terminalWriter writes what it is given as TerminalText. Each Write is
// taken whole: the printers write a colour sequence within one string.
type terminalWriter struct{ w io.Writer }

func (t terminalWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, TerminalText(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
