package convert

import (
	"fmt"
	"strings"
)

// splitCommandLine splits a command line into words as a POSIX shell does,
// without its expansions: blanks separate words, single quotes keep
// everything, double quotes keep all but \" \\ \$ and \`, a backslash
// outside quotes keeps the next character, and a backslash before a newline
// continues the line, as in commands copied from documentation.
func splitCommandLine(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord := false
	runes := []rune(line)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch r {
		case ' ', '\t', '\n', '\r':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case '\\':
			if i+1 == len(runes) {
				return nil, fmt.Errorf("the command line ends with a backslash")
			}
			i++
			if runes[i] == '\n' {
				continue
			}
			word.WriteRune(runes[i])
			inWord = true
		case '\'':
			end := indexRune(runes, i+1, '\'')
			if end < 0 {
				return nil, fmt.Errorf("the command line has an unterminated single quote")
			}
			word.WriteString(string(runes[i+1 : end]))
			i, inWord = end, true
		case '"':
			end, err := doubleQuoted(runes, i+1, &word)
			if err != nil {
				return nil, err
			}
			i, inWord = end, true
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// doubleQuoted writes the text of a double-quoted string starting at start
// to word, and returns the index of its closing quote.
func doubleQuoted(runes []rune, start int, word *strings.Builder) (int, error) {
	for i := start; i < len(runes); i++ {
		switch runes[i] {
		case '"':
			return i, nil
		case '\\':
			if i+1 < len(runes) && strings.ContainsRune("\"\\$`\n", runes[i+1]) {
				i++
				if runes[i] != '\n' {
					word.WriteRune(runes[i])
				}
				continue
			}
		}
		word.WriteRune(runes[i])
	}
	return 0, fmt.Errorf("the command line has an unterminated double quote")
}

func indexRune(runes []rune, from int, r rune) int {
	for i := from; i < len(runes); i++ {
		if runes[i] == r {
			return i
		}
	}
	return -1
}

// upstreamFlag is one flag of an upstream cluster-autoscaler command line.
type upstreamFlag struct {
	// name is the flag's name without dashes, with underscores read as
	// dashes, as the upstream autoscaler's flag set normalizes them.
	name string
	// value is the flag's value; hasValue says whether it had one.
	value    string
	hasValue bool
	// written is the flag as the command line has it, for the report.
	written string
}

// flagKinds says how flags take values: bool flags take none, unless
// written --flag=value.
type flagKinds interface {
	isBool(name string) bool
}

// parseUpstreamArgs reads a cluster-autoscaler command line as its flag set
// (spf13/pflag) does: --flag=value, --flag value, and --flag alone for a
// boolean. The program name, when the line starts with one, is skipped.
// Positional arguments, which cluster-autoscaler ignores, are warned about.
func parseUpstreamArgs(args []string, kinds flagKinds) (flags []upstreamFlag, warnings []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		args = args[1:]
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			for _, rest := range args[i+1:] {
				warnings = append(warnings, fmt.Sprintf("argument %q after -- ignored: cluster-autoscaler takes no arguments", rest))
			}
			break
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			warnings = append(warnings, positionalWarning(arg, flags))
			continue
		}
		flag, warning := splitFlag(arg)
		if warning != "" {
			warnings = append(warnings, warning)
		}
		if !flag.hasValue && !kinds.isBool(flag.name) && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			flag.value, flag.hasValue = args[i], true
			flag.written += " " + args[i]
		}
		flags = append(flags, flag)
	}
	return flags, warnings
}

// splitFlag reads --name=value or --name.
func splitFlag(arg string) (upstreamFlag, string) {
	var warning string
	name := strings.TrimPrefix(arg, "--")
	if name == arg {
		name = strings.TrimPrefix(arg, "-")
		if nameOnly, _, _ := strings.Cut(name, "="); len(nameOnly) > 1 {
			warning = fmt.Sprintf("%s has a single dash: upstream reads only one-letter flags such as -v that way; read as -%s", arg, arg)
		}
	}
	name, value, hasValue := strings.Cut(name, "=")
	return upstreamFlag{
		name:     strings.ReplaceAll(name, "_", "-"),
		value:    value,
		hasValue: hasValue,
		written:  arg,
	}, warning
}

// positionalWarning says that arg is ignored, and what was likely meant
// when it follows a boolean flag.
func positionalWarning(arg string, before []upstreamFlag) string {
	if len(before) > 0 && !before[len(before)-1].hasValue {
		last := before[len(before)-1]
		return fmt.Sprintf("argument %q after %s ignored, as upstream ignores it: a boolean flag takes its value as --%s=%s", arg, last.written, last.name, arg)
	}
	return fmt.Sprintf("argument %q ignored: cluster-autoscaler takes no arguments", arg)
}
