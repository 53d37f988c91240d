package agent

import (
	"fmt"
	"net/netip"
	"sync"
)

// ipam hands out pod addresses: the same host number in each of a node's
// pod ranges, so a pod's IPv4 and IPv6 addresses end alike.
type ipam struct {
	mu   sync.Mutex
	used map[string]string // address -> pod uid
}

func newIPAM() *ipam { return &ipam{used: map[string]string{}} }

// use records addresses a pod already has (adopted after a restart).
func (m *ipam) use(uid string, ips []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ip := range ips {
		m.used[ip] = uid
	}
}

// release frees a pod's addresses.
func (m *ipam) release(uid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ip, u := range m.used {
		if u == uid {
			delete(m.used, ip)
		}
	}
}

// allocate returns one free address from each range for the pod.
func (m *ipam) allocate(uid string, cidrs []string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefixes := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("pod range %q: %w", c, err)
		}
		prefixes = append(prefixes, p.Masked())
	}
	// Host numbers 2..254: .0 is the range, .1 is left unused, as bridges' gateways are.
	for host := 2; host < 255; host++ {
		ips := make([]string, 0, len(prefixes))
		free := true
		for _, p := range prefixes {
			ip := nth(p.Addr(), host).String()
			if _, taken := m.used[ip]; taken {
				free = false
				break
			}
			ips = append(ips, ip)
		}
		if free {
			for _, ip := range ips {
				m.used[ip] = uid
			}
			return ips, nil
		}
	}
	return nil, fmt.Errorf("no free pod address in %v", cidrs)
}

// nth returns addr plus n (n < 256), in its last byte.
func nth(addr netip.Addr, n int) netip.Addr {
	b := addr.AsSlice()
	b[len(b)-1] += byte(n)
	out, _ := netip.AddrFromSlice(b)
	return out
}
