// Package weakctx is a context whose derived contexts are held weakly: a
// context derived from it and dropped without being cancelled is collected,
// not kept until the parent ends.
//
// A context.WithCancel child of an ordinary cancellable context stays in its
// parent's set of children until one of them is cancelled. Code that drops
// such a child without calling its cancel function leaks it for the
// parent's lifetime (go vet's lostcancel). go-libp2p-pubsub v0.17.0 does so
// once per peer: handleNewPeer derives the writer's context from the
// PubSub's and never cancels it when the peer leaves (the writer ends when
// its queue closes). Each leaked child also keeps the map in which the
// writer's queue registered its context.AfterFunc: about 400 bytes per peer
// session, for the life of the node. In a 1 000-node simnet run the leak
// held 400 MB, 5 % of the heap, and it grows with every connection the
// connection manager closes.
//
// New wraps a context so that a derived context registers with it weakly
// (the context package's afterFuncer path): the registration lives as long
// as the child, and the parent's end still cancels every child that is
// alive.
package weakctx

import (
	"context"
	"runtime"
	"sync"
	"weak"
)

// Context is a context whose children are held weakly. Its Done channel is
// its own (closed once the wrapped context is done), so that the context
// package does not register children in the wrapped context's set.
type Context struct {
	context.Context // the wrapped context: Deadline, Value
	done            chan struct{}

	mu     sync.Mutex
	regs   map[uint64]weak.Pointer[box]
	next   uint64
	pruned int // len(regs) after the last prune
	ended  bool
}

// box holds a child's cancel function. The child's stop function (kept by
// the child) holds the box; the Context holds only a weak pointer to it.
type box struct{ f func() }

// New returns a Context that ends when parent does.
func New(parent context.Context) *Context {
	c := &Context{Context: parent, done: make(chan struct{}), regs: map[uint64]weak.Pointer[box]{}}
	context.AfterFunc(parent, c.end)
	return c
}

// Done is closed once the wrapped context is done.
func (c *Context) Done() <-chan struct{} { return c.done }

// Err is nil until Done is closed, then the wrapped context's error.
func (c *Context) Err() error {
	select {
	case <-c.done:
		return c.Context.Err()
	default:
		return nil
	}
}

// AfterFunc arranges to call f in its own goroutine once c is done, as
// context.AfterFunc does; the context package calls it for every context
// derived from c. The registration is dropped when stop is called or when
// nothing holds stop any more.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	b := &box{f: f}
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	id := c.next
	c.next++
	c.regs[id] = weak.Make(b)
	if len(c.regs) >= 2*max(c.pruned, 64) {
		c.pruneLocked()
	}
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		_, ok := c.regs[id]
		delete(c.regs, id)
		c.mu.Unlock()
		runtime.KeepAlive(b) // the child holds stop, stop holds the box
		return ok
	}
}

// Registered is the number of registrations whose child is still alive
// (after a collection, a dropped child no longer counts).
func (c *Context) Registered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked()
	return len(c.regs)
}

func (c *Context) pruneLocked() {
	for id, wp := range c.regs {
		if wp.Value() == nil {
			delete(c.regs, id)
		}
	}
	c.pruned = len(c.regs)
}

// end runs when the wrapped context is done: every child still alive is
// cancelled.
func (c *Context) end() {
	c.mu.Lock()
	c.ended = true
	var fs []func()
	for _, wp := range c.regs {
		if b := wp.Value(); b != nil {
			fs = append(fs, b.f)
		}
	}
	clear(c.regs)
	c.mu.Unlock()
	close(c.done)
	for _, f := range fs {
		go f()
	}
}
