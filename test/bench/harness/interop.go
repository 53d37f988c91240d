package harness

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/test/bench/report"
)

// awsCluster is the cluster id the AWS-controller-shaped writer exports
// from: no mcsd runs there.
const awsCluster = "aws-bench"

// interopPhase (Cloud Map only): a writer shaped as the AWS Cloud Map MCS
// controller (its instances and attributes, written straight to Cloud Map,
// as that controller writes them) exports Services of its own, one at a
// time: it creates the Cloud Map service, registers one endpoint (an
// export), then a second (an endpoint change). Each is timed from the
// registration until every mcsd cluster's import holds the endpoint, ready.
// The writer's own calls go to moto directly and are not counted.
func (r *run) interopPhase(ctx context.Context) error {
	n := r.opts.InteropSamples
	cli := sd.New(sd.Options{Region: mototest.Region, Credentials: mototest.Credentials, BaseEndpoint: aws.String(r.cloudMap.moto.URL)})
	nsID, err := namespaceID(ctx, cli, namespace)
	if err != nil {
		return err
	}
	var exports, changes []float64
	ph, err := r.measure(ctx, PhaseInterop, fmt.Sprintf("an AWS-controller-shaped writer exports %d Services one at a time, then adds an endpoint to each", n),
		func(*report.Phase) error {
			for k := range n {
				name := fmt.Sprintf("aws-%05d", k)
				out, err := cli.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String(name), NamespaceId: aws.String(nsID)})
				if err != nil {
					return fmt.Errorf("create Cloud Map service %s: %w", name, err)
				}
				created := strconv.FormatInt(time.Now().UnixMilli(), 10)
				for step := range 2 {
					ip := fmt.Sprintf("10.251.%d.%d", k%250, step+1)
					wait := r.tr.awaitAddress(name, ip)
					id, attrs := mototest.AWSControllerInstance(awsCluster, r.env.TB.ClusterSetID(), ip, targetPort, true, created)
					start := time.Now()
					if _, err := cli.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: out.Service.Id, InstanceId: aws.String(id), Attributes: attrs}); err != nil {
						return fmt.Errorf("register %s in %s: %w", id, name, err)
					}
					select {
					case <-wait.all:
					case <-time.After(r.opts.Timeout):
						return fmt.Errorf("%s of %s: not imported everywhere within %s", ip, name, r.opts.Timeout)
					case <-ctx.Done():
						return ctx.Err()
					}
					r.tr.mu.Lock()
					for _, at := range wait.done {
						d := at.Sub(start).Seconds()
						if step == 0 {
							exports = append(exports, d)
						} else {
							changes = append(changes, d)
						}
					}
					r.tr.mu.Unlock()
				}
			}
			return nil
		})
	ph.Changes = 2 * n
	ph.Latency["AWS-controller export → import"] = report.Summarize(exports)
	ph.Latency["AWS-controller endpoint change → import"] = report.Summarize(changes)
	return err
}

// namespaceID returns the id of the Cloud Map namespace called name.
func namespaceID(ctx context.Context, cli *sd.Client, name string) (string, error) {
	p := sd.NewListNamespacesPaginator(cli, &sd.ListNamespacesInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("list Cloud Map namespaces: %w", err)
		}
		for _, ns := range page.Namespaces {
			if aws.ToString(ns.Name) == name {
				return aws.ToString(ns.Id), nil
			}
		}
	}
	return "", fmt.Errorf("no Cloud Map namespace %s: nothing exported yet", name)
}
