package api

// DecodeCheckResult decodes one answer (of POST /v1/check, GET /v1/check,
// /v1/acquire, or an error body {"error":"...","field":"..."}) into dst.
// Absent and null fields are zero. It checks types, not values.
func DecodeCheckResult(data []byte, dst *CheckResult) error {
	if len(data) > MaxBodyBytes {
		return &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	s := scanner{data: data}
	if s.peek() != '{' {
		s.skip(0)
		s.end()
		if s.err != nil {
			return s.err
		}
		return &FieldError{Msg: "body must be a JSON object"}
	}
	fe := s.result(dst, -1)
	s.end()
	if s.err != nil {
		return s.err
	}
	if fe != nil {
		return fe
	}
	return nil
}

// DecodeResults decodes a {"results":[...]} answer, reusing dst's capacity,
// and returns the results in order. An error body ({"error":...}) is
// returned as a *FieldError holding its field and message.
func DecodeResults(data []byte, dst []CheckResult) ([]CheckResult, error) {
	if len(data) > MaxBodyBytes {
		return dst[:0], &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	s := scanner{data: data}
	if s.peek() != '{' {
		s.skip(0)
		s.end()
		if s.err != nil {
			return dst[:0], s.err
		}
		return dst[:0], &FieldError{Msg: "body must be a JSON object"}
	}
	s.pos++
	var (
		kb      [16]byte
		fe      *FieldError
		seen    bool
		errBody CheckResult
		sb      [256]byte
	)
	out := dst[:0]
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			switch {
			case !ok:
				s.skip(1)
			case string(k) == "results":
				if seen && fe == nil {
					fe = &FieldError{Field: "results", Msg: "given twice"}
				}
				seen = true
				switch {
				case s.null():
					seen = false
				case s.peek() != '[':
					s.skip(1)
					if fe == nil {
						fe = &FieldError{Field: "results", Msg: "must be an array"}
					}
				default:
					out = s.resultList(out[:0], &fe)
				}
			case string(k) == "error":
				s.resultString(&errBody.Error, "error", -1, &fe, sb[:0])
			case string(k) == "field":
				s.resultString(&errBody.Field, "field", -1, &fe, sb[:0])
			default:
				s.skip(1)
			}
			if !s.next('}') {
				break
			}
		}
	}
	s.end()
	switch {
	case s.err != nil:
		return dst[:0], s.err
	case fe != nil:
		return dst[:0], fe
	case !seen && errBody.Error != "":
		return dst[:0], &FieldError{Field: errBody.Field, Msg: errBody.Error}
	case !seen:
		return dst[:0], &FieldError{Field: "results", Msg: "required"}
	}
	return out, nil
}

// resultList reads the results array (s.pos at '['), appending to out.
func (s *scanner) resultList(out []CheckResult, fe **FieldError) []CheckResult {
	s.pos++
	if s.peek() == ']' {
		s.pos++
		return out
	}
	for s.err == nil {
		i := len(out)
		if i < cap(out) {
			out = out[:i+1]
		} else {
			out = append(out, CheckResult{})
		}
		if s.peek() != '{' {
			s.skip(2)
			if *fe == nil {
				*fe = &FieldError{Field: resultField(i, ""), Msg: "must be a JSON object"}
			}
		} else if e := s.result(&out[i], i); e != nil && *fe == nil {
			*fe = e
		}
		if !s.next(']') {
			break
		}
	}
	return out
}

// resultString reads a string (or null) field of a result into dst.
func (s *scanner) resultString(dst *string, name string, idx int, fe **FieldError, buf []byte) {
	if s.null() {
		*dst = ""
		return
	}
	if s.peek() != '"' {
		s.skip(2)
		if *fe == nil {
			*fe = &FieldError{Field: resultField(idx, name), Msg: "must be a string"}
		}
		return
	}
	raw, esc := s.str()
	if esc {
		raw, _ = unescapeJSON(buf, raw, MaxBodyBytes)
	}
	setString(dst, raw)
}

// result reads one result object (s.pos at '{') into dst; absent fields are
// zeroed. It returns the first type error.
func (s *scanner) result(dst *CheckResult, idx int) *FieldError {
	s.pos++
	var (
		fe   *FieldError
		kb   [16]byte
		sb   [256]byte
		seen uint16
	)
	*dst = CheckResult{Rule: dst.Rule, Key: dst.Key, LeaseID: dst.LeaseID, Error: dst.Error, Field: dst.Field}
	strs := [...]*string{&dst.Rule, &dst.Key, &dst.LeaseID, &dst.Error, &dst.Field}
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			f := -1
			if ok {
				f = resultFieldIndex(k)
			}
			if f >= 0 {
				if seen&(1<<f) != 0 && fe == nil {
					fe = &FieldError{Field: resultField(idx, resultFields[f]), Msg: "given twice"}
				}
				seen |= 1 << f
			}
			switch {
			case f < 0:
				s.skip(2)
			case f < 2: // allowed, degraded
				b := &dst.Allowed
				if f == 1 {
					b = &dst.Degraded
				}
				switch {
				case s.null():
				case s.peek() == 't' && s.literal("true"):
					*b = true
				case s.peek() == 'f' && s.literal("false"):
				default:
					s.skip(2)
					if fe == nil {
						fe = &FieldError{Field: resultField(idx, resultFields[f]), Msg: "must be a boolean"}
					}
				}
			case f < 6: // limit, remaining, reset_ms, retry_after_ms
				n := [...]*int64{&dst.Limit, &dst.Remaining, &dst.ResetMS, &dst.RetryAfterMS}[f-2]
				if s.null() {
					break
				}
				c := s.peek()
				if c != '-' && (c < '0' || c > '9') {
					s.skip(2)
					if fe == nil {
						fe = &FieldError{Field: resultField(idx, resultFields[f]), Msg: "must be an integer"}
					}
					break
				}
				raw, isInt := s.number()
				x, ok := parseInt(raw)
				if s.err == nil && (!isInt || !ok) && fe == nil {
					fe = &FieldError{Field: resultField(idx, resultFields[f]), Msg: "must be an integer"}
				}
				*n = x
			default:
				s.resultString(strs[f-6], resultFields[f], idx, &fe, sb[:0])
			}
			if !s.next('}') {
				break
			}
		}
	}
	for i, p := range strs {
		if seen&(1<<(i+6)) == 0 {
			*p = ""
		}
	}
	return fe
}

var resultFields = [...]string{"allowed", "degraded", "limit", "remaining", "reset_ms", "retry_after_ms", "rule", "key", "lease_id", "error", "field"}

func resultFieldIndex(k []byte) int {
	for i, f := range resultFields {
		if string(k) == f {
			return i
		}
	}
	return -1
}
