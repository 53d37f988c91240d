package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/mcsd-io/mcsd/test/testbed"
)

func main() {
	server := flag.String("server", "127.0.0.1:53", "DNS server, host:port")
	qtype := flag.String("type", "A", "query type: A, AAAA, SRV, TXT, ...")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: dnsq [-server HOST:PORT] [-type TYPE] NAME")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	t, ok := dns.StringToType[strings.ToUpper(*qtype)]
	if !ok {
		fmt.Fprintf(os.Stderr, "dnsq: unknown query type %q\n", *qtype)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := testbed.Query(ctx, *server, flag.Arg(0), t)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsq:", err)
		os.Exit(1)
	}
	fmt.Printf("status: %s\n", dns.RcodeToString[m.Rcode])
	for _, sec := range []struct {
		name string
		rrs  []dns.RR
	}{{"answer", m.Answer}, {"additional", m.Extra}} {
		for _, rr := range sec.rrs {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			fmt.Printf("%-10s %s\n", sec.name, rr.String())
		}
	}
}
