package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// MinMajorVersion is the oldest PostgreSQL major version the harness accepts.
const MinMajorVersion = 15

// ErrNoServer reports that no PostgreSQL server binaries of a supported
// version were found. `make test` and `make demo` install them first
// (scripts/ensure-postgres); a bare `go test` does not.
var ErrNoServer = errors.New("pgcluster: no PostgreSQL server binaries found (need initdb, postgres and pg_basebackup, version 15 or later); run `make deps` or `apt-get install postgresql`, or set THROTTLED_PG_BINDIR")

// FindBinDir returns the directory holding initdb, postgres and
// pg_basebackup of the newest supported installed version. The environment
// variable THROTTLED_PG_BINDIR, when set, wins.
func FindBinDir() (string, error) {
	if dir := os.Getenv("THROTTLED_PG_BINDIR"); dir != "" {
		if err := checkBinDir(dir); err != nil {
			return "", fmt.Errorf("pgcluster: THROTTLED_PG_BINDIR=%q: %w", dir, err)
		}
		return dir, nil
	}
	var candidates []string
	// Debian and Ubuntu keep each major version apart.
	if matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(matches) > 0 {
		sort.Slice(matches, func(i, j int) bool { return majorOfPath(matches[i]) > majorOfPath(matches[j]) })
		candidates = append(candidates, matches...)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
	}
	for _, dir := range candidates {
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	return "", ErrNoServer
}

func majorOfPath(p string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
	return n
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

func checkBinDir(dir string) error {
	for _, name := range []string{"initdb", "postgres", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("missing %s", name)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return fmt.Errorf("postgres --version: %w", err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("unrecognised version %q", strings.TrimSpace(string(out)))
	}
	major, _ := strconv.Atoi(string(m[1]))
	if major < MinMajorVersion {
		return fmt.Errorf("version %d is older than %d", major, MinMajorVersion)
	}
	return nil
}

// osUser is the account the servers run as. PostgreSQL refuses to run as
// root, so when this process is root the servers run as the "postgres"
// account the Debian package creates, or "nobody" when that is missing.
type osUser struct {
	uid, gid uint32
	name     string
	cred     *syscall.Credential // nil when no switch is needed
}

func serverUser() (osUser, error) {
	if os.Geteuid() != 0 {
		return osUser{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return osUser{
			uid: uint32(uid), gid: uint32(gid), name: name,
			cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true},
		}, nil
	}
	return osUser{}, errors.New("pgcluster: running as root and neither the postgres nor the nobody account exists; PostgreSQL refuses to run as root")
}

// Account is the OS account the servers run as, for other harnesses
// (internal/testenv/patronicluster) that start PostgreSQL the same way.
type Account struct {
	// UID and GID own the data directories.
	UID, GID uint32
	// Credential switches a child process to the account; nil when this
	// process is not root and no switch is needed.
	Credential *syscall.Credential
}

// ServerAccount returns the account PostgreSQL runs as: this process's
// own, or, when it is root, the "postgres" account (else "nobody").
func ServerAccount() (Account, error) {
	u, err := serverUser()
	if err != nil {
		return Account{}, err
	}
	return Account{UID: u.uid, GID: u.gid, Credential: u.cred}, nil
}
