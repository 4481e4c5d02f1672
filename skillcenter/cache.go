package skillcenter

import (
	"sync"
	"time"
)

// MaxCachedSkills bounds the skills held by a client's cache, over all
// entries; beyond it the oldest entries are evicted.
const MaxCachedSkills = 100000

// cacheEntry is one cached answer, keyed by its request.
type cacheEntry struct {
	list    SkillList
	etag    string
	fetched time.Time
}

// answerCache keeps answers by request. Entries younger than ttl are
// fresh; older ones are kept until ttl+staleFor to answer, marked stale,
// when the catalog fails. It holds at most maxEntries entries and
// MaxCachedSkills skills, evicting the oldest first.
type answerCache struct {
	ttl, staleFor time.Duration
	maxEntries    int

	mu     sync.Mutex
	m      map[string]*cacheEntry
	skills int
}

func newAnswerCache(ttl, staleFor time.Duration, maxEntries int) *answerCache {
	return &answerCache{ttl: ttl, staleFor: staleFor, maxEntries: maxEntries, m: map[string]*cacheEntry{}}
}

func (c *answerCache) enabled() bool { return c.ttl > 0 }

// get returns the entry for key, whether it is fresh, and whether it
// exists at all (inside the stale window).
func (c *answerCache) get(key string, now time.Time) (cacheEntry, bool, bool) {
	if !c.enabled() {
		return cacheEntry{}, false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	if e == nil {
		return cacheEntry{}, false, false
	}
	age := now.Sub(e.fetched)
	if age >= c.ttl+c.staleFor {
		c.deleteLocked(key)
		return cacheEntry{}, false, false
	}
	return *e, age < c.ttl, true
}

func (c *answerCache) put(key string, e cacheEntry) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleteLocked(key)
	c.m[key] = &e
	c.skills += len(e.list.Skills)
	for len(c.m) > 1 && (len(c.m) > c.maxEntries || c.skills > MaxCachedSkills) {
		var oldest string
		var ot time.Time
		for k, x := range c.m {
			if k != key && (oldest == "" || x.fetched.Before(ot)) {
				oldest, ot = k, x.fetched
			}
		}
		c.deleteLocked(oldest)
	}
}

// touch marks an entry as confirmed now (a 304 answer).
func (c *answerCache) touch(key string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil {
		e.fetched = now
	}
}

func (c *answerCache) delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleteLocked(key)
}

func (c *answerCache) deleteLocked(key string) {
	if e := c.m[key]; e != nil {
		c.skills -= len(e.list.Skills)
		delete(c.m, key)
	}
}

// cachedSkill is a skill of some cached answer and when it was fetched.
type cachedSkill struct {
	skill   Skill
	fetched time.Time
}

// all returns every skill of every entry inside the stale window, the
// newest answer for each skill id.
func (c *answerCache) all(now time.Time) []cachedSkill {
	if !c.enabled() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	best := map[string]cachedSkill{}
	for k, e := range c.m {
		if now.Sub(e.fetched) >= c.ttl+c.staleFor {
			c.deleteLocked(k)
			continue
		}
		for _, s := range e.list.Skills {
			if cur, ok := best[s.ID]; !ok || e.fetched.After(cur.fetched) {
				best[s.ID] = cachedSkill{skill: s, fetched: e.fetched}
			}
		}
	}
	out := make([]cachedSkill, 0, len(best))
	for _, s := range best {
		out = append(out, s)
	}
	return out
}

// len returns the number of entries.
func (c *answerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
