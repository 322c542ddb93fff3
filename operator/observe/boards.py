"""fgpu's three dashboards, as data: every query reads only metric names of the catalogue
(fgpu_contracts/metrics; tests/observe checks it) with the labels the catalogue gives them.

Template variables (each multi-valued, with All): `node` and `gpu` (the GPU's UUID) from the scheduler's
per-GPU series, `namespace` from its per-pod allocations; plus `datasource` (added by `grafana`). The node
daemon's series name the node in `Hostname` and the GPU in `UUID` (dcgm-exporter's labels; a MIG instance's
`UUID` is its GPU's), the operator's in `node` and `device_uuid`; the device plugin's carry `node` from the
scrape config (deploy/prometheus/scrape-configs.yaml), as its metrics are per node.
"""
from __future__ import annotations

from .model import Board, Panel, Row, Target, Variable

RATE = "$__rate_interval"
GPU = 'Hostname=~"$node", UUID=~"$gpu"'  # node daemon: dcgm-exporter's labels
POD = GPU + ', namespace=~"$namespace"'  # node daemon: per-pod series
MIG = GPU + ', GPU_I_PROFILE!=""'
SCHED_GPU = 'node=~"$node", device_uuid=~"$gpu"'  # operator: per GPU, as the scheduler handed it out
PLUGIN = 'node=~"$node"'  # device plugin: `node` is the scrape target's
GPU_LEGEND = "{{Hostname}} GPU {{gpu}} {{GPU_I_PROFILE}}"
POD_LEGEND = "{{namespace}}/{{pod}}"

VARIABLES = (
    Variable("node", "Node", "label_values(hami_gpu_memory_limit_bytes, node)",
             "GPU nodes fgpu's scheduler knows"),
    Variable("gpu", "GPU", 'label_values(hami_gpu_memory_limit_bytes{node=~"$node"}, device_uuid)',
             "GPU UUIDs on the selected nodes (a MIG instance is shown under its GPU)"),
    Variable("namespace", "Namespace", 'label_values(hami_vgpu_memory_allocated_bytes{node=~"$node"}, namespace)',
             "namespaces of pods holding GPU shares on the selected nodes"),
)


def _quantile(q: float, bucket: str, selector: str = "", by: str = "le") -> str:
    return f"histogram_quantile({q}, sum by ({by}) (rate({bucket}{{{selector}}}[{RATE}])))"


CLUSTER = Board(
    uid="fgpu-cluster",
    title="fgpu / Cluster overview",
    description="GPU allocation and fragmentation, pods waiting for fgpu's scheduler and why, scheduler "
                "latency, admission webhook outcomes.",
    variables=VARIABLES,
    rows=(
        Row("Capacity", (
            Panel("GPU allocation and fragmentation", key=True, unit="percentunit", min=0, max=1, targets=(
                Target("fgpu_cluster_gpu_allocation_ratio", "allocated"),
                Target("fgpu_cluster_gpu_fragmentation_ratio", "fragmented (of idle)"),
            ), description="Share of GPU capacity allocated (milli-GPU over fractional and exclusive GPUs), and "
                           "FGD's fragmentation: the share of idle capacity the target workload could not use."),
            Panel("Fragmented GPUs", unit="none", targets=(
                Target("fgpu_cluster_fragmented_gpus", "fragmented GPUs"),
            ), description="FGD's fragment in GPUs: idle capacity a typical pod could not use."),
            Panel("Allocated share per GPU", key=True, unit="percentunit", min=0, max=1, targets=(
                Target(f"fgpu_scheduler_gpu_allocated_ratio{{{SCHED_GPU}}}", "{{node}} GPU {{device_index}}"),
            ), description="Compute share of each GPU given out by fgpu's scheduler (MIG instances count "
                           "towards their GPU)."),
            Panel("Allocated memory per GPU", unit="percentunit", min=0, max=1, targets=(
                Target('hami_node_gpu_memory_allocated_ratio{node=~"$node", device_uuid=~"$gpu"}',
                       "{{node}} GPU {{device_index}}"),
            ), description="Device memory given out over the GPU's memory."),
            Panel("GPUs by sharing mode and health", unit="none", targets=(
                Target("sum by (sharing, healthy) (fgpu_cluster_gpus)", "{{sharing}} healthy={{healthy}}"),
            )),
            Panel("Scheduler leader", kind="stat", unit="none", targets=(
                Target("sum(fgpu_operator_leader)", "replicas leading"),
            ), description="Operator replicas holding the scheduler Lease (1 expected)."),
        )),
        Row("Scheduling", (
            Panel("Pending pods by reason", key=True, unit="none", targets=(
                Target('sum by (queue) (fgpu_scheduler_pending_pods{queue!="unschedulable"})', "{{queue}}"),
                Target('sum by (reason) (fgpu_scheduler_pending_pods{queue="unschedulable"}) > 0',
                       "unschedulable: {{reason}}"),
            ), description="Pods waiting for fgpu's scheduler: awaiting a decision, binding, or parked as "
                           "unschedulable, by the filter that rejected the most nodes."),
            Panel("Scheduler latency (create to bound)", key=True, unit="s", targets=(
                Target(_quantile(0.5, "fgpu_scheduler_create_to_bound_seconds_bucket"), "p50"),
                Target(_quantile(0.99, "fgpu_scheduler_create_to_bound_seconds_bucket"), "p99"),
                Target("sum(fgpu_scheduler_create_to_bound_seconds_sum) / "
                       "sum(fgpu_scheduler_create_to_bound_seconds_count)", "mean since start"),
            ), description="From a pod's creation (whole seconds) to fgpu's Binding."),
            Panel("Scheduling attempts", unit="ops", targets=(
                Target(f"sum by (result, reason) (rate(fgpu_scheduler_attempts_total[{RATE}]))",
                       "{{result}} {{reason}}"),
            )),
            Panel("Binds by result", unit="ops", targets=(
                Target(f"sum by (result) (rate(fgpu_scheduler_binds_total[{RATE}]))", "{{result}}"),
                Target(f"sum(rate(fgpu_scheduler_events_dropped_total[{RATE}]))", "pod Events dropped"),
            ), description="Binding writes by result, and pod Events (Scheduled, FailedScheduling) dropped "
                           "because 1,000 writes were already waiting."),
        )),
        Row("Admission", (
            Panel("Webhook admissions", unit="ops", targets=(
                Target(f"sum by (webhook, outcome) (rate(fgpu_webhook_admissions_total[{RATE}]))",
                       "{{webhook}} {{outcome}}"),
            ), description="Admission reviews by webhook (mutate: pod CREATE, validate: pod UPDATE) and outcome."),
            Panel("Webhook denials since operator start", key=True, unit="none", min=0, targets=(
                Target('sum by (webhook) (fgpu_webhook_admissions_total{outcome="denied"})', "{{webhook}} denied"),
            ), description="Requests the webhook refused (a bad GPU request, or a hand-off annotation edited by "
                           "someone other than fgpu), counted since the operator started: a denial of a new kind "
                           "starts its series at 1, which rate() and increase() cannot see."),
        )),
    ),
)

GPU_DETAIL = Board(
    uid="fgpu-gpu",
    title="fgpu / GPU and node detail",
    description="Per GPU and MIG instance: utilisation, SM / tensor / DRAM activity, memory, power, MIG "
                "instances and the pods on each GPU; the device plugin of each node.",
    variables=VARIABLES,
    rows=(
        Row("Activity", (
            Panel("GPU utilisation", key=True, unit="percent", min=0, max=100, targets=(
                Target(f"DCGM_FI_DEV_GPU_UTIL{{{GPU}}}", GPU_LEGEND),
            ), description="Share of the window with a kernel executing (DCGM_FI_DEV_GPU_UTIL)."),
            Panel("SM activity", key=True, unit="percentunit", min=0, max=1, targets=(
                Target(f"DCGM_FI_PROF_SM_ACTIVE{{{GPU}}}", GPU_LEGEND),
            ), description="Ratio of cycles an SM has at least one warp assigned."),
            Panel("Tensor pipe activity", key=True, unit="percentunit", min=0, max=1, targets=(
                Target(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{GPU}}}", GPU_LEGEND),
            )),
            Panel("DRAM activity", key=True, unit="percentunit", min=0, max=1, targets=(
                Target(f"DCGM_FI_PROF_DRAM_ACTIVE{{{GPU}}}", GPU_LEGEND),
            )),
            Panel("SM occupancy", unit="percentunit", min=0, max=1, targets=(
                Target(f"DCGM_FI_PROF_SM_OCCUPANCY{{{GPU}}}", GPU_LEGEND),
            )),
            Panel("Graphics engine activity", unit="percentunit", min=0, max=1, targets=(
                Target(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{GPU}}}", GPU_LEGEND),
            )),
            Panel("Power", unit="watt", targets=(
                Target(f"DCGM_FI_DEV_POWER_USAGE{{{GPU}}}", GPU_LEGEND),
            )),
            Panel("SM clock", unit="rotmhz", targets=(
                Target(f"DCGM_FI_DEV_SM_CLOCK{{{GPU}}}", GPU_LEGEND),
            )),
        )),
        Row("Memory", (
            Panel("Framebuffer used", key=True, unit="mbytes", min=0, targets=(
                Target(f"DCGM_FI_DEV_FB_USED{{{GPU}}}", GPU_LEGEND),
            ), description="Device memory in use per GPU or MIG instance (MiB)."),
            Panel("Framebuffer free", unit="mbytes", min=0, targets=(
                Target(f"DCGM_FI_DEV_FB_FREE{{{GPU}}}", GPU_LEGEND),
            )),
            Panel("Memory per pod", unit="bytes", min=0, targets=(
                Target(f"fgpu_pod_gpu_memory_used_bytes{{{POD}}}", POD_LEGEND + " used"),
                Target(f"fgpu_pod_gpu_memory_limit_bytes{{{POD}}}", POD_LEGEND + " limit"),
            ), description="Device memory held by each pod's contexts, and its quota."),
            Panel("Memory spilled to host per pod", unit="bytes", min=0, targets=(
                Target(f"fgpu_pod_gpu_memory_spilled_bytes{{{POD}}}", POD_LEGEND),
            ), description="Only in oversubscribe mode (memoryQuota: oversubscribe)."),
        )),
        Row("MIG and pods", (
            Panel("MIG instances", key=True, unit="none", min=0, targets=(
                Target(f"count by (Hostname, gpu, GPU_I_PROFILE) (DCGM_FI_DEV_FB_FREE{{{MIG}}})",
                       "{{Hostname}} GPU {{gpu}} {{GPU_I_PROFILE}}"),
            ), description="MIG instances per GPU and profile."),
            Panel("MIG instance utilisation", unit="percent", min=0, max=100, targets=(
                Target(f"DCGM_FI_DEV_GPU_UTIL{{{MIG}}}", GPU_LEGEND + " #{{GPU_I_ID}}"),
            )),
            Panel("Pods per GPU", key=True, unit="none", min=0, targets=(
                Target(f"sum by (node, device_index) (fgpu_scheduler_gpu_containers{{{SCHED_GPU}}})",
                       "{{node}} GPU {{device_index}} placed"),
                Target(f'count by (Hostname, gpu) (fgpu_pod_kernels_total{{{GPU}, pod!=""}})',
                       "{{Hostname}} GPU {{gpu}} running"),
            ), description="Containers holding a share of each GPU (fgpu's scheduler), and pods with contexts "
                           "open on it (node daemon)."),
            Panel("SM share per pod", unit="percentunit", min=0, targets=(
                Target(f"fgpu_pod_sm_active{{{POD}}}", POD_LEGEND),
            )),
            Panel("Kernels per pod", unit="ops", targets=(
                Target(f"sum by (namespace, pod) (rate(fgpu_pod_kernels_total{{{POD}}}[{RATE}]))", POD_LEGEND),
            )),
            Panel("Health and XID errors", unit="none", targets=(
                Target(f"fgpu_device_healthy{{{GPU}}}", GPU_LEGEND + " healthy"),
                Target(f"DCGM_FI_DEV_XID_ERRORS{{{GPU}}}", GPU_LEGEND + " last XID"),
            )),
        )),
        Row("Device plugin", (
            Panel("Advertised devices", unit="none", min=0, targets=(
                Target(f"sum by (node, resource, health) (fgpu_deviceplugin_devices{{{PLUGIN}}})",
                       "{{node}} {{resource}} {{health}}"),
            ), description="Device IDs each node's plugin advertises to the kubelet."),
            Panel("Allocate calls", unit="ops", targets=(
                Target(f"sum by (node, resource, result) (rate(fgpu_deviceplugin_allocations_total{{{PLUGIN}}}"
                       f"[{RATE}]))", "{{node}} {{resource}} {{result}}"),
            )),
            Panel("Allocate latency p99", unit="s", targets=(
                Target(_quantile(0.99, "fgpu_deviceplugin_allocate_duration_seconds_bucket", PLUGIN, "le, node"),
                       "{{node}}"),
            )),
            Panel("Allocations not yet recorded on pods", unit="none", min=0, targets=(
                Target(f"fgpu_deviceplugin_unwritten_records{{{PLUGIN}}}", "{{node}}"),
            )),
        )),
    ),
)

QOS = Board(
    uid="fgpu-qos",
    title="fgpu / QoS",
    description="How much co-located pods slow each other down, by priority, and whether high-priority pods "
                "meet their SLO (a slowdown bound).",
    variables=VARIABLES,
    rows=(
        Row("Slowdown", (
            Panel("Slowdown by priority", key=True, unit="none", min=1, targets=(
                Target(f"avg by (priority) (fgpu_pod_slowdown{{{POD}}})", "{{priority}} mean"),
                Target(f"max by (priority) (fgpu_pod_slowdown{{{POD}}})", "{{priority}} max"),
            ), description="How much longer pods' kernels take than alone with their own limits (1 = no "
                           "interference)."),
            Panel("Slowdown per pod", key=True, unit="none", min=1, targets=(
                Target(f"fgpu_pod_slowdown{{{POD}}}", POD_LEGEND + " ({{priority}})"),
            )),
            Panel("Progress rate by priority", unit="percentunit", min=0, max=1, targets=(
                Target(f"avg by (priority) (fgpu_pod_progress_rate{{{POD}}})", "{{priority}}"),
            ), description="Speed while the pod had work, relative to running alone (1 / slowdown)."),
            Panel("Priorities enforced", kind="stat", unit="none", targets=(
                Target('fgpu_qos_priorities_enabled{Hostname=~"$node"}', "{{Hostname}}"),
            ), description="1 where the node daemon makes low-priority work yield to high-priority work."),
        )),
        Row("SLO", (
            Panel("SLO violations", key=True, unit="ops", min=0, targets=(
                Target(f"sum by (namespace, pod) (rate(fgpu_qos_slo_violations_total{{{POD}}}[{RATE}]))",
                       POD_LEGEND),
            ), description="SLO evaluations per second in which a high-priority pod's slowdown exceeded its "
                           "bound (one evaluation per 50 ms of the pod's work)."),
            Panel("SLO attainment", key=True, unit="percentunit", min=0, max=1, targets=(
                Target(f"fgpu_qos_slo_attainment_ratio{{{POD}}}", POD_LEGEND),
            ), description="Share of a high-priority pod's SLO evaluations that met its bound, since it started."),
            Panel("Violating share of evaluations", unit="percentunit", min=0, max=1, targets=(
                Target(f"sum by (namespace, pod) (rate(fgpu_qos_slo_violations_total{{{POD}}}[{RATE}])) / "
                       f"sum by (namespace, pod) (rate(fgpu_qos_slo_evaluations_total{{{POD}}}[{RATE}]))",
                       POD_LEGEND),
            )),
            Panel("SLO bound", unit="none", min=1, targets=(
                Target(f"fgpu_qos_slo_slowdown_bound{{{POD}}}", POD_LEGEND),
            ), description="The slowdown each high-priority pod tolerates (fgpu.io/slo-slowdown, else the "
                           "cluster's default)."),
        )),
    ),
)

BOARDS = (CLUSTER, GPU_DETAIL, QOS)


def board(uid: str) -> Board:
    for b in BOARDS:
        if b.uid == uid:
            return b
    raise KeyError(uid)
