package lan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Socket is a multicast datagram socket: bound to one IPv4 group and port,
// joined on a set of interfaces. The UDP protocol and mDNS each run on one.
// The real implementation is opened by OSNetwork; tests inject an
// in-memory one.
type Socket interface {
	// ReadFrom reads one datagram into b. A datagram longer than b is
	// truncated to len(b) (the kernel's behaviour), so callers size b one
	// byte above their limit to detect oversize datagrams. ifIndex is the
	// interface the datagram arrived on (0 when unknown).
	ReadFrom(b []byte) (n int, src netip.AddrPort, ifIndex int, err error)
	// Multicast sends b to the group on interface ifIndex, or on every
	// joined interface when ifIndex is 0. It fails only when no interface
	// took the datagram.
	Multicast(b []byte, ifIndex int) error
	// WriteTo sends b unicast to dst (out of ifIndex when non-zero).
	WriteTo(b []byte, dst netip.AddrPort, ifIndex int) error
	// LocalAddrs returns the IPv4 addresses of interface ifIndex, or of
	// every joined interface when ifIndex is 0.
	LocalAddrs(ifIndex int) []netip.Addr
	// Interfaces returns the indexes of the joined interfaces.
	Interfaces() []int
	// Sync re-reads the interfaces: it joins the group on interfaces that
	// came up and forgets those that went away. It fails when no usable
	// interface is left.
	Sync() error
	// Close closes the socket; a blocked ReadFrom returns an error.
	Close() error
}

// Network opens multicast sockets. OSNetwork is the real one.
type Network interface {
	// ListenMulticast opens a socket on group (an IPv4 multicast address
	// and port) joined on the named interface, or on every up,
	// multicast-capable interface with an IPv4 address when ifName is "".
	// ttl is the IP TTL of the datagrams it sends.
	ListenMulticast(group netip.AddrPort, ifName string, ttl int) (Socket, error)
}

// Errors of ListenMulticast.
var (
	// ErrNoInterface is returned when no interface can carry multicast:
	// the named one does not exist, is down, has multicast off or no IPv4
	// address, or no interface qualifies.
	ErrNoInterface = errors.New("no multicast-capable interface")
)

// OSNetwork opens real sockets with golang.org/x/net/ipv4: the port is
// bound on the wildcard address with SO_REUSEADDR and SO_REUSEPORT so that
// several daemons (and Avahi, on 5353) on one host all receive the group's
// datagrams; IP_MULTICAST_ALL is off, so only the group joined by this
// socket is delivered; multicast loopback is on, so daemons on one host see
// each other; datagrams that arrive on an interface the socket did not
// join, or for another destination than the group or a local unicast
// address, are dropped.
type OSNetwork struct{}

var _ Network = OSNetwork{}

// ListenMulticast implements Network.
func (OSNetwork) ListenMulticast(group netip.AddrPort, ifName string, ttl int) (Socket, error) {
	if !group.Addr().Is4() || !group.Addr().IsMulticast() {
		return nil, fmt.Errorf("group %s is not an IPv4 multicast address", group.Addr())
	}
	ifaces, err := multicastInterfaces(ifName)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
				return
			}
			// Only the groups joined by this socket, not every group
			// any socket of the host joined on this port.
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", group.Port()))
	if err != nil {
		return nil, fmt.Errorf("listen on udp port %d: %w", group.Port(), err)
	}
	pc := ipv4.NewPacketConn(conn)
	s := &osSocket{conn: conn, pc: pc, group: group, ifName: ifName, joined: map[int]net.Interface{}}
	fail := func(err error) (Socket, error) {
		_ = conn.Close()
		return nil, err
	}
	if err := pc.SetControlMessage(ipv4.FlagInterface|ipv4.FlagDst, true); err != nil {
		return fail(fmt.Errorf("enable IP_PKTINFO: %w", err))
	}
	if err := pc.SetMulticastTTL(ttl); err != nil {
		return fail(fmt.Errorf("set multicast TTL: %w", err))
	}
	if err := pc.SetMulticastLoopback(true); err != nil {
		return fail(fmt.Errorf("enable multicast loopback: %w", err))
	}
	if err := s.join(ifaces); err != nil {
		return fail(err)
	}
	return s, nil
}

// multicastInterfaces returns the interfaces to join: the named one, which
// must be up, multicast-capable and have an IPv4 address, or every such
// interface when name is "".
func multicastInterfaces(name string) ([]net.Interface, error) {
	if name != "" {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("%w: interface %q: %v", ErrNoInterface, name, err)
		}
		if why := unusable(ifi); why != "" {
			return nil, fmt.Errorf("%w: interface %q %s", ErrNoInterface, name, why)
		}
		return []net.Interface{*ifi}, nil
	}
	all, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("%w: list interfaces: %v", ErrNoInterface, err)
	}
	var out []net.Interface
	for i := range all {
		if unusable(&all[i]) == "" {
			out = append(out, all[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no interface is up with multicast on and an IPv4 address", ErrNoInterface)
	}
	return out, nil
}

func unusable(ifi *net.Interface) string {
	switch {
	case ifi.Flags&net.FlagUp == 0:
		return "is down"
	case ifi.Flags&net.FlagMulticast == 0:
		return "has multicast off"
	case len(ipv4Addrs(ifi)) == 0:
		return "has no IPv4 address"
	}
	return ""
}

func ipv4Addrs(ifi *net.Interface) []netip.Addr {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && ipn.IP.To4() != nil {
			out = append(out, ip)
		}
	}
	return out
}

type osSocket struct {
	conn   net.PacketConn
	pc     *ipv4.PacketConn
	group  netip.AddrPort
	ifName string

	mu     sync.Mutex
	joined map[int]net.Interface // by index
	addrs  map[int][]netip.Addr  // IPv4 addresses by interface index
	local  map[netip.Addr]bool   // every local IPv4 address
}

// join joins the group on ifaces and rebuilds the address tables.
func (s *osSocket) join(ifaces []net.Interface) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	group := &net.UDPAddr{IP: net.IP(s.group.Addr().AsSlice())}
	var errs []error
	next := map[int]net.Interface{}
	for _, ifi := range ifaces {
		if _, ok := s.joined[ifi.Index]; ok {
			next[ifi.Index] = ifi
			continue
		}
		if err := s.pc.JoinGroup(&ifi, group); err != nil && !errors.Is(err, unix.EADDRINUSE) {
			// 224.0.0.1 is joined by the kernel on every interface;
			// an explicit join may report EADDRINUSE, which is fine.
			errs = append(errs, fmt.Errorf("join %s on %s: %w", s.group.Addr(), ifi.Name, err))
			continue
		}
		next[ifi.Index] = ifi
	}
	for idx, ifi := range s.joined {
		if _, ok := next[idx]; !ok {
			_ = s.pc.LeaveGroup(&ifi, group)
		}
	}
	if len(next) == 0 {
		return fmt.Errorf("%w: %w", ErrNoInterface, errors.Join(errs...))
	}
	s.joined = next
	s.addrs = map[int][]netip.Addr{}
	s.local = map[netip.Addr]bool{}
	for idx, ifi := range next {
		s.addrs[idx] = ipv4Addrs(&ifi)
	}
	if all, err := net.InterfaceAddrs(); err == nil {
		for _, a := range all {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && ipn.IP.To4() != nil {
					s.local[ip] = true
				}
			}
		}
	}
	return nil
}

func (s *osSocket) ReadFrom(b []byte) (int, netip.AddrPort, int, error) {
	for {
		n, cm, src, err := s.pc.ReadFrom(b)
		if err != nil {
			return 0, netip.AddrPort{}, 0, err
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		from := ua.AddrPort()
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		ifIndex := 0
		if cm != nil {
			ifIndex = cm.IfIndex
			if !s.accepts(cm) {
				continue
			}
		}
		return n, from, ifIndex, nil
	}
}

// accepts reports whether a datagram with control message cm is for this
// socket: it arrived on a joined interface (the kernel delivers 224.0.0.1
// from every interface, joined or not), and it is addressed to the group
// or to a local unicast address.
func (s *osSocket) accepts(cm *ipv4.ControlMessage) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cm.IfIndex != 0 {
		if _, ok := s.joined[cm.IfIndex]; !ok {
			return false
		}
	}
	if cm.Dst == nil {
		return true
	}
	dst, ok := netip.AddrFromSlice(cm.Dst.To4())
	if !ok {
		return false
	}
	return dst == s.group.Addr() || s.local[dst]
}

func (s *osSocket) Multicast(b []byte, ifIndex int) error {
	s.mu.Lock()
	var idx []int
	if ifIndex != 0 {
		if _, ok := s.joined[ifIndex]; ok {
			idx = []int{ifIndex}
		}
	} else {
		for i := range s.joined {
			idx = append(idx, i)
		}
		slices.Sort(idx)
	}
	s.mu.Unlock()
	if len(idx) == 0 {
		return fmt.Errorf("%w: interface index %d is not joined", ErrNoInterface, ifIndex)
	}
	dst := &net.UDPAddr{IP: net.IP(s.group.Addr().AsSlice()), Port: int(s.group.Port())}
	var errs []error
	sent := 0
	for _, i := range idx {
		if _, err := s.pc.WriteTo(b, &ipv4.ControlMessage{IfIndex: i}, dst); err != nil {
			errs = append(errs, err)
			continue
		}
		sent++
	}
	if sent == 0 {
		return fmt.Errorf("multicast to %s: %w", s.group, errors.Join(errs...))
	}
	return nil
}

func (s *osSocket) WriteTo(b []byte, dst netip.AddrPort, ifIndex int) error {
	var cm *ipv4.ControlMessage
	if ifIndex != 0 {
		cm = &ipv4.ControlMessage{IfIndex: ifIndex}
	}
	_, err := s.pc.WriteTo(b, cm, net.UDPAddrFromAddrPort(dst))
	return err
}

func (s *osSocket) LocalAddrs(ifIndex int) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ifIndex != 0 {
		if a, ok := s.addrs[ifIndex]; ok {
			return slices.Clone(a)
		}
	}
	var out []netip.Addr
	idx := make([]int, 0, len(s.addrs))
	for i := range s.addrs {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		out = append(out, s.addrs[i]...)
	}
	return out
}

func (s *osSocket) Interfaces() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.joined))
	for i := range s.joined {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

func (s *osSocket) Sync() error {
	ifaces, err := multicastInterfaces(s.ifName)
	if err != nil {
		return err
	}
	return s.join(ifaces)
}

func (s *osSocket) Close() error { return s.conn.Close() }
