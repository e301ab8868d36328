package main

// equivalent are the mutants no input can tell from the original, by
// file, the line and the mutated line (trimmed: mutant.key), with the
// reason.
var equivalent = map[string]string{}
