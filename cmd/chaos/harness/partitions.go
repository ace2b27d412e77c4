package harness

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// partitionSamples reads, every 250 ms, how many partitions each serve
// process holds (strata_projection_partitions_held on its metrics
// address), and counts the samples in which every process held some: the
// sign that the partitions were shared, not run by one process with the
// others standing by.
type partitionSamples struct {
	mu            sync.Mutex
	samples, both int
}

func (p *partitionSamples) sample(ctx context.Context, addrs []string) {
	client := &http.Client{Timeout: time.Second}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		every := true
		answered := 0
		for _, a := range addrs {
			n, ok := partitionsHeld(ctx, client, "http://"+a+"/metrics")
			if ok {
				answered++
			}
			every = every && ok && n > 0
		}
		p.mu.Lock()
		if answered == len(addrs) {
			p.samples++
			if every {
				p.both++
			}
		}
		p.mu.Unlock()
	}
}

// settle waits, up to limit, until a sample has found every process
// holding partitions. A short load can end before the partitions have
// spread again after its last kill (the restarted process counts itself
// in within a second, takes a partition at its next lease retry, three
// seconds): sharing is then judged on the processes left to run.
func (p *partitionSamples) settle(ctx context.Context, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		if both, _ := p.result(); both > 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (p *partitionSamples) result() (both, samples int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.both, p.samples
}

// partitionsHeld sums a process's strata_projection_partitions_held; ok is
// false when the process does not answer (killed, restarting).
func partitionsHeld(ctx context.Context, client *http.Client, url string) (int, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, false
	}
	n := 0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "strata_projection_partitions_held{") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			n += int(v)
		}
	}
	return n, sc.Err() == nil
}
