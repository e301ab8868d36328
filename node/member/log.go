package member

import (
	"context"
	"log"
	"log/slog"
)

// memberlistLogger adapts memberlist's "[LEVEL] memberlist: msg" lines to
// slog; lines about refused gossip go through rej.
func memberlistLogger(l *slog.Logger, rej *rejectLog) *log.Logger {
	return log.New(logWriter{l, rej}, "", 0)
}

type logWriter struct {
	l   *slog.Logger
	rej *rejectLog
}

func (w logWriter) Write(p []byte) (int, error) {
	s := string(p)
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	level := slog.LevelInfo
	for _, lv := range []struct {
		tag string
		l   slog.Level
	}{{"[DEBUG] ", slog.LevelDebug}, {"[INFO] ", slog.LevelInfo}, {"[WARN] ", slog.LevelWarn}, {"[ERR] ", slog.LevelError}, {"[ERROR] ", slog.LevelError}} {
		if len(s) >= len(lv.tag) && s[:len(lv.tag)] == lv.tag {
			level, s = lv.l, s[len(lv.tag):]
			break
		}
	}
	if !w.rej.handle(level, s) {
		w.l.Log(context.Background(), level, s)
	}
	return len(p), nil
}
