package rules

import "unicode/utf8"

// globMsg says what is wrong with glob pattern p, or "" when it is valid.
func globMsg(p string) string {
	switch {
	case p == "":
		return "empty glob"
	case len(p) > 1024:
		return "glob longer than 1024 bytes"
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i+1 == len(p) {
				return "glob ends with a lone \\"
			}
			i++
		case '[':
			return "character classes are not supported; write \\[ for a literal ["
		}
	}
	if !utf8.ValidString(p) {
		return "glob must be valid UTF-8"
	}
	return ""
}

// globMatch reports whether s matches the valid glob p: '*' matches any
// run of bytes (including '/'), '?' any one character (a UTF-8 sequence, or
// one byte of invalid UTF-8), '\' escapes the next character. It runs in
// O(len(p)·len(s)) at worst and does not allocate.
func globMatch[T string | []byte](p string, s T) bool {
	// Classic backtracking on the last star: a later star supersedes an
	// earlier one, so one restart point suffices.
	var px, sx int
	starP, starS := -1, 0
	for px < len(p) || sx < len(s) {
		if px < len(p) {
			switch c := p[px]; c {
			case '*':
				starP, starS = px, sx
				px++
				continue
			case '?':
				if sx < len(s) {
					lead := s[sx] >= 0xC0
					px++
					sx++
					for n := 1; lead && n < utf8.UTFMax && sx < len(s) && s[sx]&0xC0 == 0x80; n++ {
						sx++ // the rest of a UTF-8 sequence
					}
					continue
				}
			default:
				lit, n := c, 1
				if c == '\\' && px+1 < len(p) {
					lit, n = p[px+1], 2
				}
				if sx < len(s) && s[sx] == lit {
					px += n
					sx++
					continue
				}
			}
		}
		if starP >= 0 && starS < len(s) {
			starS++
			px, sx = starP+1, starS
			continue
		}
		return false
	}
	return true
}
