package subscriber

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/targetdb"
)

// claimTimeout bounds the wait for the target sessions of an earlier run
// of the slot (another process's) to end before a run reads the progress
// row; those of this process's previous run are ended at once.
const claimTimeout = time.Minute

// openTarget opens a target session of this run and notes its backend, so
// that the next run can end it if it outlives this one; share takes the
// slot's shared lock (every session but the one that claims it).
func (s *Subscriber) openTarget(ctx context.Context, cfg apply.Config, share bool) (*apply.Applier, error) {
	return s.open(ctx, cfg, share, false)
}

// keptStreamSessions bounds the stream sessions a run remembers: a long run
// opens many, one after another, and only the last few can still be there.
const keptStreamSessions = 64

// open is openTarget; a stream session (opened again and again over a
// run) is remembered among the last keptStreamSessions only.
func (s *Subscriber) open(ctx context.Context, cfg apply.Config, share, stream bool) (*apply.Applier, error) {
	if cfg.Detection == nil {
		cfg.Detection = s.runs.det.Load()
	}
	cfg.BinaryValues = s.runs.binary.Load()
	cfg.HoldMissing = s.cfg.DDL == DDLApply
	app, err := apply.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pid := app.Conn().PgConn().PID()
	s.mu.Lock()
	if stream {
		if len(s.streamSessions) >= keptStreamSessions {
			s.streamSessions = append(s.streamSessions[:0], s.streamSessions[1:]...)
		}
		s.streamSessions = append(s.streamSessions, pid)
	} else {
		s.sessions = append(s.sessions, pid)
	}
	s.mu.Unlock()
	if share {
		if err := targetdb.Share(ctx, app.Conn(), cfg.Slot); err != nil {
			app.Close(context.Background())
			return nil, err
		}
		// The slot is claimed: no session of an earlier run holds the
		// origin any more.
		if cfg.Origin != "" {
			if err := app.SetupOrigin(ctx, cfg.Origin); err != nil {
				app.Close(context.Background())
				return nil, err
			}
		}
	}
	return app, nil
}

// earlierSessions returns the backends of the previous run's target
// sessions (none on the first run).
func (s *Subscriber) earlierSessions() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.earlier
}

// endRun forgets what a run knew of the target, keeping its figures, the
// positions it reached and the pids of its sessions.
func (s *Subscriber) endRun() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tracker != nil {
		s.kept.note(s.tracker.Positions())
	}
	if s.applier != nil {
		s.past.Absorb(&s.applier.Stats)
	}
	if s.pool != nil {
		for _, w := range s.pool.workers {
			s.past.Absorb(&w.shown.Load().Stats)
		}
	}
	s.tracker, s.applier, s.pool = nil, nil, nil
	s.earlier = slices.Concat(s.sessions, s.streamSessions)
	s.sessions, s.streamSessions = nil, nil
}

// spillDir makes an empty directory for the run's spill files, named after
// the publisher database, the slot and the target database, so that the
// files of an earlier run of the same slot (one that was killed leaves its
// files behind) are removed now. Only one run of a slot gets this far at a
// time: the slot's lock on the target is held.
func (s *Subscriber) spillDir(sourceID string, app *apply.Applier) (string, error) {
	cc := app.Conn().Config()
	h := sha256.Sum256([]byte(sourceID + "\x00" + cc.Host + "\x00" + strconv.Itoa(int(cc.Port)) + "\x00" + cc.Database))
	dir := filepath.Join(s.cfg.SpillDir, "parapply-spill-"+s.cfg.Source.Slot+"-"+hex.EncodeToString(h[:6]))
	if s.cfg.SpillDir == "" {
		dir = filepath.Join(os.TempDir(), filepath.Base(dir))
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("removing the spill files of an earlier run (%s): %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating a directory for spill files: %w (set spill_directory to a writable directory)", err)
	}
	return dir, nil
}
