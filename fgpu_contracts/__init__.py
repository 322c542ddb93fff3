"""fgpu's wire contracts: the one home of every name and format that two fgpu components (or fgpu and a user)
must agree on. Imports no other fgpu package; simgpu, the device plugin and the operator all import it.

    errors      InputError: the one error type for bad input (field, value, what is allowed; one line)
    keys        annotation and label keys, resource names, scheduler name, every accepted request spelling
    request     the canonical GPU request a pod spec is parsed into (whatever spelling it used)
    assignment  the scheduler -> device plugin hand-off (`fgpu.io/assignment`, v1)
    signature   the scheduler's HMAC on that hand-off (`fgpu.io/assignment-signature`), and its key file
    inventory   a node's GPUs as the device plugin publishes them (`fgpu.io/gpu-inventory`, v1), and the
                GPUNode custom resource that carries them (deploy/crds/gpunode.yaml)
    policy      the cluster's scheduling defaults, the SchedulingPolicy custom resource
    wire        what the JSON contracts share: the model base, parsing into one InputError, object metadata
                and standard conditions
"""
