package wellknown

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of every
// EndpointSlice mcsd writes for an import. Kubernetes' own EndpointSlice
// controllers leave such slices alone, and mcsd's export controller ignores
// them, so that an import is never exported again.
const ManagedBy = "controller.mcsd.io"

// FieldManager is the field manager of every write of mcsd's controllers
// (what the API server derives from the binary's name, mcsd, when a client
// names none): an import's EndpointSlice whose only manager it is was
// written by mcsd alone.
const FieldManager = "mcsd"

// Annotations mcsd writes.
const (
	// AnnotationManaged, set to "true", marks the ServiceImports, derived
	// Services and EndpointSlices mcsd created. mcsd updates and deletes only
	// objects that carry it (EndpointSlices: or the ManagedBy label).
	AnnotationManaged = "multicluster.mcsd.io/managed"
	// AnnotationDerivedService on a ClusterSetIP ServiceImport names the
	// Service mcsd derived for it, whose cluster IPs are the import's IPs and
	// whose EndpointSlices (label kubernetes.io/service-name) hold every
	// source cluster's endpoints. It is the mcs-api controllers' annotation,
	// which Gateway API implementations read to route a backendRef of kind
	// ServiceImport.
	AnnotationDerivedService = "multicluster.kubernetes.io/derived-service"
	// AnnotationLegacyDerivedService is the annotation mcsd named the derived
	// Service with before it used AnnotationDerivedService. mcsd no longer
	// writes it: it replaces it on the next reconcile of an import, in place.
	AnnotationLegacyDerivedService = "multicluster.mcsd.io/derived-service"
	// AnnotationServiceImport on a derived Service names its ServiceImport.
	AnnotationServiceImport = "multicluster.mcsd.io/service-import"
	// AnnotationIPFamilies on a derived Service lists, comma-separated and in
	// order, the IP families mcsd asked for when it created the Service: the
	// import's families at the time. The Service's spec.ipFamilies holds fewer
	// when this cluster refused a family.
	AnnotationIPFamilies = "multicluster.mcsd.io/ip-families"
	// AnnotationSliceInputs on an import's EndpointSlice is a digest of what
	// its source cluster's slices were made from (that cluster's endpoints
	// and served ports, the import's ports, families and type, its hints
	// for that cluster), and how many slices there are: while the digest
	// holds, a reconcile does not build or compare that cluster's slices
	// again.
	AnnotationSliceInputs = "multicluster.mcsd.io/slice-inputs"
)

// What the AWS Cloud Map MCS controller (aws/aws-cloud-map-mcs-controller-for-k8s)
// leaves on the objects of a cluster where mcsd replaces it (docs/migrate-from-aws.md).
const (
	// AWSAnnotationDerivedService annotates that controller's ServiceImports
	// with its derived Services: a JSON list of {"cluster", "derived-service"}.
	AWSAnnotationDerivedService = "multicluster.k8s.aws/derived-service"
	// AWSExportFinalizer is that controller's finalizer on ServiceExports.
	AWSExportFinalizer = "multicluster.k8s.aws/service-export-finalizer"
	// AWSManagedBy is the endpointslice.kubernetes.io/managed-by value of
	// that controller's EndpointSlices.
	AWSManagedBy = "aws-cloud-map-mcs-controller-for-k8s"
	// AnnotationRetiring lists, on a ServiceImport mcsd took over from that
	// controller, the derived Services of the import it did not adopt
	// (comma-separated): they keep carrying the import's traffic until
	// AnnotationRetireAfter, then mcsd deletes them.
	AnnotationRetiring = "multicluster.mcsd.io/retiring-services"
	// AnnotationRetireAfter is when (RFC 3339) the Services of
	// AnnotationRetiring are deleted.
	AnnotationRetireAfter = "multicluster.mcsd.io/retire-after"
)
