#!/usr/bin/env python3
"""Small CRI client for the containerd integration test, one call per invocation, JSON on stdout.
Needs CRI_SOCK (containerd's socket) and CRI_STUBS (dir with api_pb2*.py from Debian's cri-api).

  cri.py runp NAME UID LOGDIR [ANNOTATIONS_JSON]  -> {"id": pod}
  cri.py create POD NAME UID LOGDIR IMAGE CMD...  -> {"id": container}  (NAME/UID as given to runp)
  cri.py start|stop|rm ID / stopp|rmp POD          -> {}
  cri.py exec ID CMD...                            -> {"rc", "out"}
  cri.py spec ID                                   -> the container's OCI spec
  cri.py cleanup                                   -> stops and removes every container and pod
"""
import json, os, sys

sys.path.insert(0, os.environ["CRI_STUBS"])
import grpc  # noqa: E402
import api_pb2 as pb  # noqa: E402
import api_pb2_grpc as rpc  # noqa: E402

rt = rpc.RuntimeServiceStub(grpc.insecure_channel("unix://" + os.environ["CRI_SOCK"]))
POD_NS = pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD)


def sandbox(name, uid, logdir, annotations):
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="default"),
        hostname=name, log_directory=logdir, annotations=annotations,
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=f"/dranet-nri-test/pod{uid}",
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=POD_NS)))


def main(cmd, *a):
    if cmd == "runp":
        ann = json.loads(a[3]) if len(a) > 3 else {}
        r = rt.RunPodSandbox(pb.RunPodSandboxRequest(config=sandbox(a[0], a[1], a[2], ann)))
        return {"id": r.pod_sandbox_id}
    if cmd == "create":
        pod, name, uid, logdir, image, *argv = a
        cfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="app"), image=pb.ImageSpec(image=image),
            command=argv, log_path="app.log",
            linux=pb.LinuxContainerConfig(security_context=pb.LinuxContainerSecurityContext(namespace_options=POD_NS)))
        r = rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=pod, config=cfg, sandbox_config=sandbox(name, uid, logdir, {})))
        return {"id": r.container_id}
    if cmd == "start":
        rt.StartContainer(pb.StartContainerRequest(container_id=a[0]))
    elif cmd == "stop":
        rt.StopContainer(pb.StopContainerRequest(container_id=a[0], timeout=1))
    elif cmd == "rm":
        rt.RemoveContainer(pb.RemoveContainerRequest(container_id=a[0]))
    elif cmd == "stopp":
        rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=a[0]))
    elif cmd == "rmp":
        rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=a[0]))
    elif cmd == "exec":
        r = rt.ExecSync(pb.ExecSyncRequest(container_id=a[0], cmd=list(a[1:]), timeout=10))
        return {"rc": r.exit_code, "out": r.stdout.decode() + r.stderr.decode()}
    elif cmd == "spec":
        r = rt.ContainerStatus(pb.ContainerStatusRequest(container_id=a[0], verbose=True))
        return json.loads(r.info["info"])["runtimeSpec"]
    elif cmd == "cleanup":
        for c in rt.ListContainers(pb.ListContainersRequest()).containers:
            rt.StopContainer(pb.StopContainerRequest(container_id=c.id, timeout=1))
            rt.RemoveContainer(pb.RemoveContainerRequest(container_id=c.id))
        for p in rt.ListPodSandbox(pb.ListPodSandboxRequest()).items:
            rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=p.id))
            rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=p.id))
    else:
        sys.exit(f"cri.py: unknown command {cmd!r}")
    return {}


if __name__ == "__main__":
    try:
        print(json.dumps(main(*sys.argv[1:])))
    except grpc.RpcError as e:
        sys.exit(f"cri.py {' '.join(sys.argv[1:])}: {e.code().name}: {e.details()}")
