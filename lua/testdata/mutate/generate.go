package main

import (
	"regexp"
	"strconv"
	"strings"
)

// mutants are the single-line mutants of the script src.
func mutants(file, src string) []mutant {
	var ms []mutant
	lines := strings.Split(src, "\n")
	prev := ""               // the previous code line
	seen := map[string]int{} // the lines so far, trimmed: how many of each
	for i, line := range lines {
		code, mask := codeOf(line)
		if strings.TrimSpace(code) == "" {
			continue
		}
		seen[strings.TrimSpace(line)]++
		nth := seen[strings.TrimSpace(line)]
		add := func(op, to string) {
			if to != line {
				ms = append(ms, mutant{file: file, line: i + 1, nth: nth, op: op, from: line, to: to})
			}
		}
		for _, c := range relational(code, mask) {
			add("rel", c+line[len(code):])
		}
		for _, c := range arithmetic(code, mask) {
			add("arith", c+line[len(code):])
		}
		for _, c := range numbers(code, mask) {
			add("num", c+line[len(code):])
		}
		for _, c := range conditions(code, mask) {
			add("cond", c+line[len(code):])
		}
		if deletable(code, prev) {
			add("del", "")
		}
		prev = code
	}
	return ms
}

// codeOf is line without its comment, and a mask of the code's bytes that
// are inside a string literal.
func codeOf(line string) (string, []bool) {
	mask := make([]bool, len(line))
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			mask[i] = true
			if c == '\\' && i+1 < len(line) {
				i++
				mask[i] = true
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote, mask[i] = c, true
		case c == '-' && i+1 < len(line) && line[i+1] == '-':
			return line[:i], mask[:i]
		}
	}
	return line, mask
}

// relational swaps each comparison outside strings.
func relational(code string, mask []bool) []string {
	var out []string
	for i := 0; i < len(code); i++ {
		if mask[i] {
			continue
		}
		two := ""
		if i+1 < len(code) {
			two = code[i : i+2]
		}
		switch {
		case two == "<=" || two == ">=":
			out = append(out, code[:i]+code[i:i+1]+code[i+2:])
			i++
		case two == "==":
			out = append(out, code[:i]+"~="+code[i+2:])
			i++
		case two == "~=":
			out = append(out, code[:i]+"=="+code[i+2:])
			i++
		case code[i] == '<' || code[i] == '>':
			if two == "<<" || two == ">>" {
				i++
				continue
			}
			out = append(out, code[:i+1]+"="+code[i+1:])
		}
	}
	return out
}

// arithmetic swaps each binary + and - outside strings.
func arithmetic(code string, mask []bool) []string {
	var out []string
	for i := 0; i < len(code); i++ {
		if mask[i] {
			continue
		}
		switch code[i] {
		case '+':
			out = append(out, code[:i]+"-"+code[i+1:])
		case '-':
			// Binary: after an operand (a name, a number, a closing
			// bracket), skipping spaces.
			j := i - 1
			for j >= 0 && code[j] == ' ' {
				j--
			}
			if j < 0 {
				continue
			}
			c := code[j]
			if c == ')' || c == ']' || c == '_' || isAlnum(c) {
				if w := lastWord(code[:j+1]); luaKeyword[w] {
					continue // return -x, and -x, ...
				}
				out = append(out, code[:i]+"+"+code[i+1:])
			}
		}
	}
	return out
}

var number = regexp.MustCompile(`[0-9]+(\.[0-9]+)?([eE][0-9]+)?`)

// numbers changes each integer literal outside strings to one more.
func numbers(code string, mask []bool) []string {
	var out []string
	for _, loc := range number.FindAllStringIndex(code, -1) {
		a, b := loc[0], loc[1]
		if mask[a] || a > 0 && (isAlnum(code[a-1]) || code[a-1] == '_' || code[a-1] == '.') {
			continue // in a string, a name (W2, x1) or a number already
		}
		if b < len(code) && (isAlnum(code[b]) || code[b] == '.') {
			continue
		}
		lit := code[a:b]
		var to string
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			to = strconv.FormatInt(n+1, 10)
		} else if f, err := strconv.ParseFloat(lit, 64); err == nil {
			to = strconv.FormatFloat(f+1, 'g', -1, 64)
		} else {
			continue
		}
		out = append(out, code[:a]+to+code[b:])
	}
	return out
}

var condition = regexp.MustCompile(`^(\s*(?:if|elseif|while|until)\s+)(.*?)(\s+(?:then|do)\b.*)?$`)

// conditions drops each operand of a top-level and/or of the line's
// condition.
func conditions(code string, mask []bool) []string {
	m := condition.FindStringSubmatchIndex(code)
	if m == nil {
		return nil
	}
	cs, ce := m[4], m[5]
	// The top-level operands: split at " and " / " or " outside brackets
	// and strings.
	var cuts [][2]int // the connectors' spans
	depth := 0
	for i := cs; i < ce; i++ {
		if mask[i] {
			continue
		}
		switch code[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		}
		if depth != 0 {
			continue
		}
		for _, w := range []string{" and ", " or "} {
			if strings.HasPrefix(code[i:ce], w) {
				cuts = append(cuts, [2]int{i, i + len(w)})
			}
		}
	}
	if len(cuts) == 0 {
		return nil
	}
	var out []string
	// Operand k spans from the end of connector k-1 to the start of
	// connector k; dropping it drops one of its connectors too.
	for k := 0; k <= len(cuts); k++ {
		a, b := cs, cuts[0][1] // the first operand and the connector after it
		if k > 0 {
			a, b = cuts[k-1][0], ce // the connector before it and the operand
			if k < len(cuts) {
				b = cuts[k][0]
			}
		}
		out = append(out, code[:a]+code[b:])
	}
	return out
}

// deletable is whether code is a statement line a mutant may delete: an
// assignment or call, whole on its line, no declaration, no block
// structure.
func deletable(code, prev string) bool {
	s := strings.TrimSpace(code)
	w := firstWord(s)
	if luaKeyword[w] && !(w == "if" && strings.HasSuffix(s, " end")) {
		return false // a block's structure (a one-line if ... end may go)
	}
	if strings.HasPrefix(s, "}") || strings.HasPrefix(s, ")") {
		return false
	}
	if !balanced(code) || continues(strings.TrimSpace(prev)) || continues(s) {
		return false
	}
	return true
}

// continues is whether a statement ending so continues on the next line.
func continues(s string) bool {
	for _, end := range []string{",", "(", "{", "[", "=", "..", "+", "-", "*", "/", " and", " or"} {
		if strings.HasSuffix(s, end) {
			return true
		}
	}
	return false
}

func balanced(s string) bool {
	_, mask := codeOf(s)
	d := 0
	for i := 0; i < len(s) && i < len(mask); i++ {
		if mask[i] {
			continue
		}
		switch s[i] {
		case '(', '[', '{':
			d++
		case ')', ']', '}':
			d--
		}
	}
	return d == 0
}

var luaKeyword = map[string]bool{"local": true, "return": true, "break": true, "if": true, "elseif": true, "else": true,
	"end": true, "for": true, "while": true, "repeat": true, "until": true, "do": true, "function": true,
	"and": true, "or": true, "not": true, "then": true, "in": true, "goto": true}

func firstWord(s string) string {
	i := 0
	for i < len(s) && (isAlnum(s[i]) || s[i] == '_') {
		i++
	}
	return s[:i]
}

func lastWord(s string) string {
	i := len(s)
	for i > 0 && (isAlnum(s[i-1]) || s[i-1] == '_') {
		i--
	}
	return s[i:]
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
