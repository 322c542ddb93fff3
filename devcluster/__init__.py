"""A Kubernetes cluster with emulated GPUs on one machine, no Docker: the real control plane built by
`make testbin` (etcd, kube-apiserver, kube-scheduler, KWOK), a stub kubelet for KWOK nodes, and fgpu's own
processes. One home for what the e2e tests, the benchmarks and `make demo` (devcluster.demo) all start.

    kubeplane     etcd + kube-apiserver (+ controller-manager, kube-scheduler, KWOK) as child processes
    stub_kubelet  the kubelet's device-plugin side: Registration server, ListAndWatch follower, Allocate client
    realnode      one GPU node on real processes (daemon, plugin, stub kubelet) that faults can SIGKILL
    contexts      workload processes holding live daemon contexts with the tokens Allocate issued
"""
