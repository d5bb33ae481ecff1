package tablesync

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// task is one thing a copy worker does: a chunk's COPY, or a step of a
// table's index phase.
type task struct {
	chunk *chunk
	step  *step
}

// queue hands the copy's workers their tasks: a step of an index phase
// before a chunk (a table whose rows are in is done sooner, and the
// builds of the last table go to every worker rather than to the one that
// copied its last range), chunks in the order planned. A worker waits
// while nothing is ready but a task still runs, which may make some
// ready; the queue is drained when nothing is left and nothing runs.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks []chunk
	next   int
	ready  []*step
	busy   int
	// The builds measured so far, for the ETA: heap bytes read and time.
	builtBytes atomic.Int64
	buildNanos atomic.Int64
}

func newQueue(chunks []chunk) *queue {
	q := &queue{chunks: chunks}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// take returns the next task, waiting for one while others run; false
// once the queue is drained or ctx is done.
func (q *queue) take(ctx context.Context) (task, bool) {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for ctx.Err() == nil {
		switch {
		case len(q.ready) > 0:
			s := q.ready[0]
			q.ready = q.ready[1:]
			q.busy++
			return task{step: s}, true
		case q.next < len(q.chunks):
			c := &q.chunks[q.next]
			q.next++
			q.busy++
			return task{chunk: c}, true
		case q.busy == 0:
			return task{}, false
		}
		q.cond.Wait()
	}
	return task{}, false
}

// done ends a task taken, making ready the steps it led to.
func (q *queue) done(ready []*step) {
	q.mu.Lock()
	q.ready = append(q.ready, ready...)
	q.busy--
	q.mu.Unlock()
	q.cond.Broadcast()
}

// rowsIn starts table j's index phase once its rows are in: the steps of
// its first batch (none when nothing was deferred).
func (q *queue) rowsIn(j *tableJob) []*step {
	q.mu.Lock()
	defer q.mu.Unlock()
	return j.nextBatch()
}

// stepDone records a step of table j's index phase as done: it returns the
// steps of the next batch once the step's batch is done, and last when
// that was the table's last batch.
func (q *queue) stepDone(s *step, took time.Duration) (next []*step, last bool) {
	j := s.j
	if !s.attach {
		j.buildsLeft.Add(-1)
		q.builtBytes.Add(j.heapBytes())
		q.buildNanos.Add(int64(took))
	}
	if s.then == "" {
		j.built.Add(1)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	j.running--
	if j.running > 0 {
		return nil, false
	}
	next = j.nextBatch()
	return next, len(next) == 0
}

// nextBatch takes table j's next batch of steps, counting them as
// running; under the queue's lock.
func (j *tableJob) nextBatch() []*step {
	if len(j.batches) == 0 {
		return nil
	}
	b := j.batches[0]
	j.batches = j.batches[1:]
	j.running = len(b)
	return b
}

// heapBytes is the table's size on the source, as planned.
func (j *tableJob) heapBytes() int64 {
	return j.pages * 8192
}
