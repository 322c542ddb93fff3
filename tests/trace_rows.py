"""A small OpenB-shaped trace for the simulator's tests: nodes and pod rows. (A named module at the tests root:
a test that imported these from `conftest` got whichever folder's conftest pytest loaded last.)"""

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},32000,131072,{g},{m}\n" for i, (g, m) in enumerate([(2, "T4")] * 6 + [(8, "G2")] * 3 + [(1, "V100M16")] * 3))
PODS_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def pod_rows(n=40):
    shapes = [(4000, 1, 1000), (2000, 1, 500), (1000, 1, 250), (8000, 2, 1000), (1000, 0, 0), (2000, 1, 810)]
    rows = []
    for i in range(n):
        cpu, num, milli = shapes[i % len(shapes)]
        qos = ["LS", "BE", "Burstable", "Guaranteed"][i % 4]
        rows.append(f"p{i:03d},{cpu},4096,{num},{milli},,{qos},Running,{i * 10},{i * 10 + 300},{i * 10}\n")
    return rows
