"""moto_server with AWS Cloud Map fidelity fixes, for the cloudmap backend's tests.

Run it with the interpreter of the virtualenv that hack/moto/ensure-venv.sh
makes, with moto_server's own arguments:

    .cache/moto-venv/bin/python hack/moto/cloudmap_server.py -H 127.0.0.1 -p 5000

It starts moto's server (moto.server.main) after patching the servicediscovery
backend where moto 5.2.x differs from Cloud Map in ways the backend depends on.
Each patch makes moto do what the Cloud Map API reference documents:

1. RegisterInstance with an existing InstanceId updates that instance (moto
   appends a second instance with the same id, and DeregisterInstance then
   removes only one of them).
2. DiscoverInstancesRevision, and the InstancesRevision DiscoverInstances
   returns with the instances, increase on every registration and
   deregistration in the service (moto sums per-instance counters of the
   instances that still exist, or of those returned, so a deregistration can
   lower it and a deregistration plus a registration can leave it
   unchanged).
3. ListServices honours the NAMESPACE_ID filter (moto ignores Filters).
4. CreateHttpNamespace of an existing name fails with NamespaceAlreadyExists,
   and CreateService of an existing name in the namespace with
   ServiceAlreadyExists (moto creates duplicates).
5. DeleteService of a service with instances, and DeleteNamespace of a
   namespace with services, fail with ResourceInUse (moto deletes them).
6. Operations: RegisterInstance and DeregisterInstance record their
   namespace and service among the operation's targets, as UpdateService
   records its namespace (moto records the instance alone); ListOperations
   lists them (moto keeps only operations whose namespace target exists, so
   instance operations never show), honours the documented filters
   NAMESPACE_ID and SERVICE_ID (EQ), STATUS and TYPE (EQ, IN) and
   UPDATE_DATE (BETWEEN two Unix times, seconds), and pages with MaxResults
   (default and at most 100) and NextToken (moto ignores all of them). Pages
   are in UpdateDate order, oldest first.
7. RegisterInstance of a new instance in a service that holds 1,000 fails
   with ResourceLimitExceeded: Cloud Map's quota of instances per service,
   which cannot be raised (moto has no quota). MCSD_MOTO_INSTANCES_PER_SERVICE
   sets another bound (0: none), for tests that fill a service quickly.
8. MCSD_MOTO_INSTANCES_PER_NAMESPACE, when set above 0, bounds the instances
   of a namespace the same way (Cloud Map's quota of 2,000, which AWS raises
   on request; unset, no bound, as for an account whose quota was raised).
"""

import json
import os
import sys
import threading

from moto.core.exceptions import JsonRESTError
from moto.server import main
from moto.servicediscovery import models, responses


class _Error(JsonRESTError):
    def __init__(self, error_type, message, **fields):
        super().__init__(error_type, message)
        body = {"__type": error_type, "message": message}
        body.update(fields)
        self.description = json.dumps(body)


_register = models.ServiceDiscoveryBackend.register_instance
_deregister = models.ServiceDiscoveryBackend.deregister_instance
_create_http_namespace = models.ServiceDiscoveryBackend.create_http_namespace
_create_service = models.ServiceDiscoveryBackend.create_service
_delete_service = models.ServiceDiscoveryBackend.delete_service
_delete_namespace = models.ServiceDiscoveryBackend.delete_namespace
_update_service = models.ServiceDiscoveryBackend.update_service


# moto's server answers requests on several threads; registrations and
# deregistrations rewrite a service's instance list, so they take turns (an
# unguarded rewrite could drop an instance another thread appended meanwhile).
_instances_lock = threading.Lock()


def _bump(service):
    service.mcsd_revision = getattr(service, "mcsd_revision", 0) + 1


def _target(self, op_id, service):
    self.operations[op_id].targets.update({"NAMESPACE": service.namespace_id, "SERVICE": service.id})


_instances_per_service = int(os.environ.get("MCSD_MOTO_INSTANCES_PER_SERVICE", "1000"))
_instances_per_namespace = int(os.environ.get("MCSD_MOTO_INSTANCES_PER_NAMESPACE", "0"))


def _namespace_instances(self, namespace_id):
    return sum(len(s.instances) for s in self.services.values() if s.namespace_id == namespace_id)


def register_instance(self, service_id, instance_id, creator_request_id, attributes):
    with _instances_lock:
        service = self.get_service(service_id)
        others = [i for i in service.instances if i.instance_id != instance_id]
        new = len(others) == len(service.instances)
        if new and (0 < _instances_per_service <= len(others) or
                    0 < _instances_per_namespace <= _namespace_instances(self, service.namespace_id)):
            raise _Error(
                "ResourceLimitExceeded",
                "The operation can't be completed because you've reached the quota for the number of instances.",
            )
        service.instances[:] = others
        op = _register(self, service_id, instance_id, creator_request_id, attributes)
        _bump(service)
        _target(self, op, service)
        return op


def deregister_instance(self, service_id, instance_id):
    with _instances_lock:
        op = _deregister(self, service_id, instance_id)
        service = self.get_service(service_id)
        _bump(service)
        _target(self, op, service)
        return op


def update_service(self, service_id, details):
    op = _update_service(self, service_id, details)
    _target(self, op, self.get_service(service_id))
    return op


def discover_instances_revision(self, namespace_name, service_name):
    # Raises NamespaceNotFound / ServiceNotFound as Cloud Map does.
    self.discover_instances(namespace_name, service_name)
    for ns in self.namespaces.values():
        if ns.name != namespace_name:
            continue
        for srv in self.services.values():
            if srv.name == service_name and srv.namespace_id == ns.id:
                return getattr(srv, "mcsd_revision", 0)
    return 0


_discover_instances_response = responses.ServiceDiscoveryResponse.discover_instances


def discover_instances_response(self):
    body = json.loads(_discover_instances_response(self))
    params = json.loads(self.body)
    body["InstancesRevision"] = self.servicediscovery_backend.discover_instances_revision(
        params.get("NamespaceName"), params.get("ServiceName"))
    return json.dumps(body)


def create_http_namespace(self, name, creator_request_id, description, tags):
    for ns in self.namespaces.values():
        if ns.name == name:
            raise _Error(
                "NamespaceAlreadyExists",
                f"Namespace {name} already exists",
                NamespaceId=ns.id,
            )
    return _create_http_namespace(self, name, creator_request_id, description, tags)


def create_service(self, name, namespace_id, *args, **kwargs):
    self.get_namespace(namespace_id)
    for srv in self.services.values():
        if srv.name == name and srv.namespace_id == namespace_id:
            raise _Error(
                "ServiceAlreadyExists",
                f"Service {name} already exists",
                ServiceId=srv.id,
            )
    return _create_service(self, name, namespace_id, *args, **kwargs)


def delete_service(self, service_id):
    service = self.get_service(service_id)
    if service.instances:
        raise _Error("ResourceInUse", f"Service {service_id} has instances")
    return _delete_service(self, service_id)


def delete_namespace(self, namespace_id):
    for srv in self.services.values():
        if srv.namespace_id == namespace_id:
            raise _Error("ResourceInUse", f"Namespace {namespace_id} has services")
    return _delete_namespace(self, namespace_id)


def list_services_response(self):
    params = json.loads(self.body or "{}")
    services = list(self.servicediscovery_backend.list_services())
    for f in params.get("Filters") or []:
        if f.get("Name") == "NAMESPACE_ID":
            values = set(f.get("Values") or [])
            services = [s for s in services if s.namespace_id in values]
    return json.dumps({"Services": [s.to_json() for s in services]})


def _operation_filter(f):
    name, values = f.get("Name"), [str(v) for v in f.get("Values") or []]
    condition = f.get("Condition") or "EQ"
    allowed = {
        "NAMESPACE_ID": ("EQ",), "SERVICE_ID": ("EQ",),
        "STATUS": ("EQ", "IN"), "TYPE": ("EQ", "IN"), "UPDATE_DATE": ("BETWEEN",),
    }
    if name not in allowed or condition not in allowed[name]:
        raise _Error("InvalidInput", f"filter {name} does not take condition {condition}")
    if condition == "EQ" and len(values) != 1 or condition == "BETWEEN" and len(values) != 2 or not values:
        raise _Error("InvalidInput", f"filter {name} with {condition} takes {'two values' if condition == 'BETWEEN' else 'one value'}")
    if name == "UPDATE_DATE":
        lo, hi = float(values[0]), float(values[1])
        return lambda op: lo <= op.updated <= hi
    key = {"NAMESPACE_ID": "NAMESPACE", "SERVICE_ID": "SERVICE"}.get(name)
    if key:
        return lambda op: op.targets.get(key) in values
    attr = "status" if name == "STATUS" else "operation_type"
    return lambda op: getattr(op, attr) in values


def list_operations_response(self):
    params = json.loads(self.body or "{}")
    ops = list(self.servicediscovery_backend.operations.values())
    for f in params.get("Filters") or []:
        keep = _operation_filter(f)
        ops = [op for op in ops if keep(op)]
    ops.sort(key=lambda op: (op.updated, op.id))
    limit = int(params.get("MaxResults") or 100)
    if not 1 <= limit <= 100:
        raise _Error("InvalidInput", "MaxResults must be between 1 and 100")
    start = int(params.get("NextToken") or 0)
    page = ops[start:start + limit]
    body = {"Operations": [op.to_json(short=True) for op in page]}
    if start + limit < len(ops):
        body["NextToken"] = str(start + limit)
    return json.dumps(body)


models.ServiceDiscoveryBackend.register_instance = register_instance
models.ServiceDiscoveryBackend.deregister_instance = deregister_instance
models.ServiceDiscoveryBackend.discover_instances_revision = discover_instances_revision
models.ServiceDiscoveryBackend.create_http_namespace = create_http_namespace
models.ServiceDiscoveryBackend.create_service = create_service
models.ServiceDiscoveryBackend.delete_service = delete_service
models.ServiceDiscoveryBackend.delete_namespace = delete_namespace
models.ServiceDiscoveryBackend.update_service = update_service
responses.ServiceDiscoveryResponse.list_operations = list_operations_response
responses.ServiceDiscoveryResponse.list_services = list_services_response
responses.ServiceDiscoveryResponse.discover_instances = discover_instances_response

if __name__ == "__main__":
    sys.exit(main())
