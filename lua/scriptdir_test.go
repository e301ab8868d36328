package lua

import (
	"io/fs"
	"os"
	"path/filepath"
)

// scriptDirEnv names a directory whose .lua files the package's tests run
// instead of the embedded scripts (every file the Store reads: the
// table's, prelude.lua, leased.lua, first_undo.lua). The mutation harness
// (lua/testdata/mutate) sets it to run the parity tests against one
// mutated line at a time without rebuilding the test binary. Test-only:
// the Store's own binary always runs the embedded scripts.
const scriptDirEnv = "SLUICE_LUA_SCRIPTS"

func init() {
	dir := os.Getenv(scriptDirEnv)
	if dir == "" {
		return
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			panic(scriptDirEnv + ": " + err.Error())
		}
		return string(b)
	}
	preludeSrc, leasedSrc, firstUndoSrc = read("prelude.lua"), read("leased.lua"), read("first_undo.lua")
	scriptFS = os.DirFS(dir).(fs.ReadFileFS)
}
