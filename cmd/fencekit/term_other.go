//go:build !linux

package main

import (
	"errors"
	"os"
)

func isTerminal(*os.File) bool { return false }

func noEcho(*os.File) (func(), error) {
	return nil, errors.New("no terminal support on this platform")
}

func foregroundTTY(*os.File) (int, bool) { return 0, false }

func takeBackTTY(int) {}
