"""Metrics of the operator (see fgpu_contracts/metrics/__init__.py), served by `fgpu operator --metrics-port`.

Who owns HAMi's names: as in HAMi, where the scheduler exports the allocation view (`hami_gpu_*`,
`hami_vgpu_*_allocated_*`) and the vGPU monitor the usage view, fgpu's operator exports every HAMi allocation
name and no other component does: it alone knows every pod's share from the moment it is bound (restored
from the pods' hand-off annotations after a restart) until the pod is gone. The device plugin exports only
its own `fgpu_deviceplugin_*` families; usage names belong to the node daemon. One HAMi allocation name is
left out: `hami_gpu_shared_count` fails `promtool check metrics` (a gauge may not end in `_count`), so the same
number is `fgpu_scheduler_gpu_containers` (a recording rule can give it HAMi's name for HAMi's dashboard).

Allocation gauges are computed at scrape time from the scheduler's in-memory model, so a pod's series leave
with the pod and a GPU's with its node or MIG layout. Values follow HAMi's units where HAMi's name is used
(its `*_core_*_ratio` gauges are percentages, 0-100) and Prometheus' base units elsewhere (ratios 0-1).
"""
from __future__ import annotations

from fgpu_contracts.metrics import Metric

GPU = ("node", "device_uuid", "device_index", "device_type")
FGPU_GPU = (*GPU, "sharing")
VGPU = ("namespace", "node", "pod", "container_index", "device_uuid")
_WHAT = "as fgpu's scheduler handed it out (the pods' fgpu.io/assignment; MIG instances count towards their GPU)"


def _m(name: str, type: str, help: str, labels: tuple[str, ...] = (), unit: str = "", compat: str = "",
       buckets: tuple[float, ...] = ()) -> Metric:
    return Metric(name=name, type=type, component="operator", help=help, labels=labels, unit=unit, compat=compat,
                  buckets=buckets)


METRICS: tuple[Metric, ...] = (
    # --- scheduling ------------------------------------------------------------------------------------
    _m("fgpu_scheduler_attempts_total", "counter",
       "Scheduling decisions by result (scheduled: a node and devices reserved; unschedulable: parked until "
       "capacity changes; error: the decision failed and the pod was parked) and reason: for unschedulable, "
       "the filter plug-in that rejected the most nodes (NodeUnschedulable, TaintToleration, NodeAffinity, "
       "NodeResourcesFit, GpuModel, GpuFit, SloFit, MigSlot), NoNodes, InvalidRequest (a request the core does not "
       "place), MigReconfiguring (waiting for a dynamic-MIG change made for it) or Other; Error for error; empty when scheduled.", ("result", "reason")),
    _m("fgpu_scheduler_binds_total", "counter",
       "Binding writes by result: ok, conflict (bound by someone else), gone (pod deleted), unavailable or "
       "failed (retried), invalid, denied, not_leader (lost the lease before writing).", ("result",)),
    _m("fgpu_scheduler_events_dropped_total", "counter",
       "Pod Events (Scheduled, FailedScheduling, hand-off restores) not written because 1,000 writes were "
       "already waiting, as client-go's event broadcaster drops when its queue is full; the pods themselves "
       "are scheduled as ever."),
    _m("fgpu_scheduler_slo_holds_total", "counter",
       "GPUs held against new low-priority shares because a protected pod there was measured (the daemons' "
       "fgpu_pod_slowdown) over its SLO bound for the sustained window (held), and GPUs released once no "
       "protected pod there is over it (released); only with --slo-feedback-prometheus.", ("change",)),
    _m("fgpu_scheduler_preemptions_total", "counter",
       "Preemption attempts for pods that fit nowhere while lower-priority pods run, by result: nominated "
       "(victims chosen and being deleted, the freed room held for the preemptor), none (evicting "
       "lower-priority pods would not make room), never (the pod's preemptionPolicy is Never), failed (a "
       "victim's delete was refused; the preemptor was parked and the victim is never chosen again).",
       ("result",)),
    _m("fgpu_scheduler_preemption_victims_total", "counter",
       "Pods chosen as preemption victims (deleted gracefully with the DisruptionTarget condition)."),
    _m("fgpu_scheduler_preemption_decision_seconds", "histogram",
       "Time the preemption planner took for one pod (its PodDisruptionBudgets read from memory, candidates "
       "and victims chosen), whether or not it nominated.",
       unit="seconds", buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)),
    _m("fgpu_scheduler_create_to_bound_seconds", "histogram",
       "From the pod's metadata.creationTimestamp (whole seconds, so up to 1 s long) to fgpu's successful "
       "Binding; pods restored after a restart or bound by another replica are not observed.",
       unit="seconds", buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600)),
    _m("fgpu_mig_reconfigurations_total", "counter",
       "Dynamic-MIG changes of one GPU's layout (docs/dynamic-mig.md) by result: started (the leader recorded "
       "a desired layout on the GPUNode for a MIG pod no instance held), done (the node reported it applied), "
       "failed (the node refused or broke it).", ("result",)),
    _m("fgpu_mig_reconfiguration_seconds", "histogram",
       "From a dynamic-MIG change's start (written on the GPUNode) to the node's Done or Failed report, as the "
       "leader saw it: the node's reconfiguration time plus the hand-shake.",
       unit="seconds", buckets=(0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300)),
    _m("fgpu_mig_reconfiguration_in_progress", "gauge",
       "Per dynamic-MIG GPU: 1 while a change of its layout is in progress (Pending: not taken up by the node "
       "yet, or Applying; its instances being re-laid are unavailable meanwhile), else 0.",
       ("node", "device_uuid")),
    _m("fgpu_scheduler_pending_pods", "gauge",
       "Pods waiting for fgpu's scheduler by queue (active: awaiting a decision; binding: decided, Binding in "
       "flight; unschedulable: parked) and, for unschedulable, the reason of their last attempt (as in "
       "fgpu_scheduler_attempts_total; every reason is present, 0 when none waits for it).",
       ("queue", "reason")),
    # --- cluster ---------------------------------------------------------------------------------------
    _m("fgpu_cluster_gpus", "gauge",
       "Physical GPUs on the nodes fgpu knows, by sharing mode (fractional, exclusive, timeSlicing, mps, mig) "
       "and health (true, false).", ("sharing", "healthy")),
    _m("fgpu_cluster_gpu_allocation_ratio", "gauge",
       "Share of GPU capacity allocated, over the healthy GPUs fgpu places shares and whole GPUs on "
       "(fractional and exclusive; MIG, time-sliced and MPS GPUs are counted resources): allocated "
       "milli-GPU / (1000 x GPUs); 0 when there are none.", unit="ratio"),
    _m("fgpu_cluster_gpu_fragmentation_ratio", "gauge",
       "FGD's fragmentation measure (the simulator's own function) over the same GPUs: the expected idle "
       "GPU capacity a pod of the target workload could not use, divided by the idle capacity; 0 when "
       "nothing is idle.", unit="ratio"),
    _m("fgpu_cluster_fragmented_gpus", "gauge",
       "FGD's fragment over the same GPUs, in GPUs: idle capacity a pod of the target workload could not "
       "use, weighted by the frequency of the workload's pod shapes (the scheduler's target workload, as the "
       "fgd and fgpu policies use it).", unit="GPUs"),
    # --- per GPU (fgpu's view) -------------------------------------------------------------------------
    _m("fgpu_scheduler_gpu_allocated_ratio", "gauge",
       f"Compute share of the GPU given out (sum of milli-GPU / 1000), {_WHAT}.", FGPU_GPU, unit="ratio"),
    _m("fgpu_scheduler_gpu_memory_allocated_bytes", "gauge",
       f"GPU memory given out, {_WHAT}.", FGPU_GPU, unit="bytes"),
    _m("fgpu_scheduler_gpu_sm_allocated_ratio", "gauge",
       f"SM limits given out (sum of the containers' SM percentage / 100), {_WHAT}.", FGPU_GPU, unit="ratio"),
    _m("fgpu_scheduler_gpu_containers", "gauge",
       "Containers holding a share of the GPU or of one of its MIG instances (HAMi's hami_gpu_shared_count, "
       "which is not exported: promtool rejects a gauge named `_count`).", FGPU_GPU),
    # --- HAMi's allocation names (the operator owns them; see the module docstring) -------------------
    _m("hami_gpu_memory_limit_bytes", "gauge", "Device memory of the GPU.", GPU, unit="bytes", compat="hami"),
    _m("hami_gpu_core_limit_ratio", "gauge", "Device core limit of the GPU (always 100, as HAMi's).", GPU,
       unit="percent", compat="hami"),
    _m("hami_gpu_memory_allocated_bytes", "gauge", f"Device memory allocated on the GPU, {_WHAT}.",
       ("node", "device_uuid", "device_index", "device_cores", "device_type"), unit="bytes", compat="hami"),
    _m("hami_gpu_core_allocated_ratio", "gauge",
       f"Device cores allocated on the GPU (sum of SM percentages, 0-100 per container), {_WHAT}.", GPU,
       unit="percent", compat="hami"),
    _m("hami_node_gpu_memory_allocated_ratio", "gauge", "Allocated over total device memory of the GPU.",
       ("node", "device_uuid", "device_index"), unit="ratio", compat="hami"),
    _m("hami_vgpu_memory_allocated_bytes", "gauge",
       "Device memory allocated to one container on one device (container_index carries the container's "
       "name); the series leaves with the pod.", VGPU, unit="bytes", compat="hami"),
    _m("hami_vgpu_core_allocated_ratio", "gauge",
       "Device cores (SM percentage, 0-100) allocated to one container on one device (container_index "
       "carries the container's name); the series leaves with the pod.", VGPU, unit="percent", compat="hami"),
    # --- webhook and process ---------------------------------------------------------------------------
    _m("fgpu_webhook_admissions_total", "counter",
       "Admission reviews by webhook (mutate: pod CREATE; validate: pod UPDATE, guarding the hand-off "
       "annotations), "
       "outcome (mutated: the request normalised and routed to fgpu; allowed: nothing to change; passed: not "
       "fgpu's pod or no GPU asked; denied) and source (the spelling the request used: fgpu, hami, "
       "kubeshare, kai, aliyun, nvidia; empty when none was read).", ("webhook", "outcome", "source")),
    _m("fgpu_operator_leader", "gauge",
       "1 while this replica holds the scheduler Lease (or runs without leader election), else 0.",
       ("identity",)),
)
