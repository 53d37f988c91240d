// Command dnsq sends one DNS query and prints the reply, like a small dig:
//
//	dnsq -server 127.0.0.1:53 [-type A] web.demo.svc.clusterset.local
//
// It exits 1 on a failed exchange, not on NXDOMAIN: the status line says that.
package main
