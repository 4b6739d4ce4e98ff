package main

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// typed makes os.Stdin, for the rest of the test, a file a person has
// typed answer on: a pseudo-terminal when terminal is set, else a pipe.
// run reads its commands' input from os.Stdin, as the binary does.
func typed(t *testing.T, answer string, terminal bool) {
	t.Helper()
	var r, w *os.File
	var err error
	if terminal {
		r, w = openPTY(t)
	} else if r, w, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString(answer); err != nil {
		t.Fatal(err)
	}
	if !terminal {
		w.Close() // the answer, then the end of input
	}
	old := os.Stdin
	os.Stdin = r
	t.Cleanup(func() {
		os.Stdin = old
		r.Close()
		w.Close()
	})
}

// openPTY opens a pseudo-terminal: what is written on master is read on
// slave, line by line, as from a person at a terminal.
func openPTY(t *testing.T) (slave, master *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("name the pseudo-terminal: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal's slave: %v", err)
	}
	return s, m
}
