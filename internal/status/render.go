package status

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// WriteJSON writes r as indented JSON.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r as tables for people: ages are relative to r.Time.
// The sections: the live clusters, the exported Services, every cluster's
// export of them, the conflicts, this cluster's own objects, and warnings.
func WriteTable(w io.Writer, r Report) error {
	p := &printer{w: w, now: r.Time}
	title := "Clusterset " + r.ClusterSet
	if r.Namespace != "" {
		title += ", namespace " + r.Namespace
	}
	p.line("%s, read at %s", title, r.Time.Format(time.RFC3339))
	p.clusters(r.Clusters)
	if len(r.Clusters) == 0 && r.ClusterSets != nil {
		if len(r.ClusterSets) == 0 {
			p.line("No clusterset of this registry has a live cluster.")
		} else {
			p.line("Clustersets with live clusters in this registry: %s (--clusterset picks one).", strings.Join(r.ClusterSets, ", "))
		}
	}
	p.services(r.Services)
	p.exports(r.Services)
	p.conflicts(r.Services)
	if r.Local != nil {
		p.local(r.Local)
	}
	if l := r.Leases; l != nil {
		p.line("")
		line := fmt.Sprintf("Leases: %d in the registry, %d holding nothing", l.Total, l.Idle)
		if l.Foreign > 0 {
			line += fmt.Sprintf(", %d holding other applications' keys", l.Foreign)
		}
		if l.Unreadable > 0 {
			line += fmt.Sprintf(", %d holding records this identity may not read", l.Unreadable)
		}
		p.line("%s.", line)
		if l.Idle > 0 {
			p.line("warning: %d leases held nothing for %s or more: some client of the registry grants leases it does not use "+
				"(etcd lets any authenticated identity grant leases; see docs/registries.md, \"Securing the registry\")",
				l.Idle, time.Duration(l.GraceSeconds*float64(time.Second)))
		}
	}
	if len(r.Warnings) > 0 {
		p.line("")
		for _, w := range r.Warnings {
			p.line("warning: %s", w)
		}
	}
	return p.err
}

// clusters writes the live clusters and their liveness.
func (p *printer) clusters(clusters []Cluster) {
	p.table("No live clusters.", len(clusters), func(t *table) {
		t.row("CLUSTER", "EXPORTS", "LAST SEEN", "EXPIRES IN", "TTL", "LIVE FOR", "LIVENESS")
		for _, c := range clusters {
			id := c.ID
			if c.Local {
				id += " (local)"
			}
			ttl := "-"
			if c.TTLSeconds > 0 {
				ttl = span(time.Duration(c.TTLSeconds * float64(time.Second)))
			}
			t.row(id, strconv.Itoa(c.Exports), p.ago(c.LastSeen), p.until(c.Expires), ttl, p.age(c.Since), liveness(c))
		}
	})
}

// services writes the exported Services as the clusterset imports them.
func (p *printer) services(services []Service) {
	p.table("No exported services.", len(services), func(t *table) {
		t.row("SERVICE", "TYPE", "PORTS", "CLUSTERS", "PUBLISHED", "CONFLICT")
		for _, s := range services {
			conflict := "-"
			if c := s.Conflict; c != nil {
				conflict = c.summary()
			}
			t.row(s.Namespace+"/"+s.Name, s.Import.Type, ports(s.Import.Ports), list(s.Import.Clusters), p.ago(s.Import.Published), conflict)
		}
	})
}

// exports writes every cluster's export of each Service, when there are any.
func (p *printer) exports(services []Service) {
	if len(services) == 0 {
		return
	}
	p.table("", 1, func(t *table) {
		t.row("EXPORT", "CLUSTER", "RANK", "TYPE", "PORTS", "ENDPOINTS", "UPDATED")
		for _, s := range services {
			for _, x := range s.Exports {
				eps, updated := "-", "-"
				if e := x.Endpoints; e != nil {
					eps = fmt.Sprintf("%d/%d ready", e.Ready, e.Total)
					updated = p.ago(e.Updated)
				}
				t.row(s.Namespace+"/"+s.Name, x.Cluster, strconv.Itoa(x.Rank), x.Type, ports(x.Ports), eps, updated)
			}
		}
	})
}

// conflicts writes the Services whose exports conflict, when there are any.
func (p *printer) conflicts(services []Service) {
	if !slices.ContainsFunc(services, func(s Service) bool { return s.Conflict != nil }) {
		return
	}
	p.table("", 1, func(t *table) {
		t.row("CONFLICT", "WINNER", "REASONS", "MESSAGE")
		for _, s := range services {
			if c := s.Conflict; c != nil {
				t.row(s.Namespace+"/"+s.Name, c.winnersCell(), strings.Join(c.Reasons, ","), c.Message)
			}
		}
	})
}

// local writes this cluster's ServiceExports and ServiceImports.
func (p *printer) local(l *Local) {
	id := l.Cluster
	if id == "" {
		id = "(id unknown)"
	}
	p.line("")
	p.line("Local cluster %s", id)
	p.table("No ServiceExports.", len(l.Exports), func(t *table) {
		t.row("SERVICEEXPORT", "VALID", "READY", "CONFLICT", "IN REGISTRY")
		for _, e := range l.Exports {
			t.row(e.Namespace+"/"+e.Name,
				conditionCell(e.Conditions, string(mcsv1beta1.ServiceExportConditionValid), "True"),
				conditionCell(e.Conditions, string(mcsv1beta1.ServiceExportConditionReady), "True"),
				conditionCell(e.Conditions, string(mcsv1beta1.ServiceExportConditionConflict), "False"),
				yesNo(e.InRegistry))
		}
	})
	p.table("No ServiceImports.", len(l.Imports), func(t *table) {
		t.row("SERVICEIMPORT", "TYPE", "READY", "CLUSTERS", "SLICES", "ENDPOINTS", "CHANGED", "PUBLISHED", "MATCHES REGISTRY")
		for _, i := range l.Imports {
			ready := "-"
			if i.Ready != nil {
				ready = conditionCell([]Condition{*i.Ready}, i.Ready.Type, "True")
			}
			matches := "yes"
			if len(i.Differs) > 0 {
				matches = "no: " + strings.Join(i.Differs, ", ")
			}
			t.row(i.Namespace+"/"+i.Name, i.Type, ready, list(i.Clusters), strconv.Itoa(i.EndpointSlices), strconv.Itoa(i.Endpoints),
				p.ago(i.LastChange), p.ago(i.Published), matches)
		}
	})
}

// printer writes lines and tables, keeping the first error.
type printer struct {
	w   io.Writer
	now time.Time
	err error
}

func (p *printer) line(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// table writes a blank line and a table that fill fills, or empty when n is
// 0.
func (p *printer) table(empty string, n int, fill func(*table)) {
	p.line("")
	if n == 0 {
		p.line("%s", empty)
		return
	}
	t := &table{tw: tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)}
	fill(t)
	if p.err == nil {
		p.err = t.tw.Flush()
	}
}

type table struct{ tw *tabwriter.Writer }

func (t *table) row(cells ...string) {
	_, _ = fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// ago is how long before now t was: "5s ago"; "-" when t is not known.
func (p *printer) ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := p.now.Sub(t); d < 0 {
		return "in " + span(-d)
	}
	return span(p.now.Sub(t)) + " ago"
}

// age is how long before now t was, without "ago": "5m".
func (p *printer) age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return span(max(p.now.Sub(t), 0))
}

// until is how long after now t is: "4s"; "overdue 1s" when it is past.
func (p *printer) until(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := t.Sub(p.now); d >= 0 {
		return span(d)
	}
	return "overdue " + span(p.now.Sub(t))
}

// span writes a duration one way at every size, to the second below an
// hour: "45s", "2m05s", "1h02m", "3d4h".
func span(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func liveness(c Cluster) string {
	switch {
	case c.Lease != "":
		return c.Liveness + " " + c.Lease
	case c.Liveness != "":
		return c.Liveness
	}
	return "-"
}

// conditionCell is the status of the condition of type typ in conds, with
// its reason when the status is not good.
func conditionCell(conds []Condition, typ, good string) string {
	for _, c := range conds {
		if c.Type != typ {
			continue
		}
		if c.Status == good || c.Reason == "" {
			return c.Status
		}
		return c.Status + " (" + c.Reason + ")"
	}
	return "-"
}

// ports formats ports as "http:80/TCP,9000/UDP".
func ports(ps []Port) string {
	if len(ps) == 0 {
		return "-"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.Name != "" {
			s[i] = p.Name + ":" + s[i]
		}
	}
	return strings.Join(s, ",")
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

// byWinner groups c's reasons by the cluster that won them, in the order of
// the reasons; the reasons without a winner come last, under "".
func (c *Conflict) byWinner() (winners []string, reasons map[string][]string) {
	reasons = map[string][]string{}
	for _, r := range c.Reasons {
		w := c.Winners[r]
		if _, ok := reasons[w]; !ok && w != "" {
			winners = append(winners, w)
		}
		reasons[w] = append(reasons[w], r)
	}
	if len(reasons[""]) > 0 {
		winners = append(winners, "")
	}
	return winners, reasons
}

// summary is c's reasons, each group with the cluster that won it:
// "PortConflict,TypeConflict (c1 wins); LabelsConflict (c2 wins)".
func (c *Conflict) summary() string {
	winners, reasons := c.byWinner()
	parts := make([]string, 0, len(winners))
	for _, w := range winners {
		part := strings.Join(reasons[w], ",")
		if w != "" {
			part += " (" + w + " wins)"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// winnersCell names the cluster that won c's reasons, or, when they differ,
// each with its reasons: "c1 (PortConflict), c2 (LabelsConflict)". "-"
// when no reason has a winner.
func (c *Conflict) winnersCell() string {
	winners, reasons := c.byWinner()
	named := slices.DeleteFunc(slices.Clone(winners), func(w string) bool { return w == "" })
	switch {
	case len(named) == 0:
		return "-"
	case len(winners) == 1:
		return named[0]
	}
	parts := make([]string, 0, len(winners))
	for _, w := range winners {
		name := w
		if w == "" {
			name = "none"
		}
		parts = append(parts, name+" ("+strings.Join(reasons[w], ",")+")")
	}
	return strings.Join(parts, ", ")
}
