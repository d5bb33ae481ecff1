package pgtest

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

//go:embed readdelay/readdelay.c
var readDelaySource []byte

// ReadDelayEnv builds a preload library that delays every file read a
// server makes by d, and returns the environment that puts it into a
// server started with it (Options.Env): the slow disk of a cloud
// subscriber. It needs the system C compiler (cc). The library goes to a
// directory of the system's temporary directory that the unprivileged
// server user can read.
func ReadDelayEnv(d time.Duration) ([]string, error) {
	sum := sha256.Sum256(readDelaySource)
	dir := filepath.Join(os.TempDir(), "parapply-readdelay-"+hex.EncodeToString(sum[:6]))
	lib := filepath.Join(dir, "libparapply_readdelay.so")
	if _, err := os.Stat(lib); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		src := filepath.Join(dir, "readdelay.c")
		if err := os.WriteFile(src, readDelaySource, 0o644); err != nil {
			return nil, err
		}
		tmp := lib + ".tmp" + strconv.Itoa(os.Getpid())
		out, err := exec.Command("cc", "-O2", "-shared", "-fPIC", "-o", tmp, src, "-ldl").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("building the read-delay library with cc: %w: %s (install a C compiler, e.g. apt-get install gcc)", err, out)
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, lib); err != nil {
			return nil, err
		}
	}
	return []string{"LD_PRELOAD=" + lib, "PARAPPLY_READ_DELAY_NS=" + strconv.FormatInt(d.Nanoseconds(), 10)}, nil
}
