// Package takeover runs, on two real clusters with the data plane and Cloud
// Map on moto, the step a user of the AWS Cloud Map MCS controller takes:
// mcsd started in place of that controller, with traffic flowing.
package takeover
