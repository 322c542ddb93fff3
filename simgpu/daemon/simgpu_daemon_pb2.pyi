from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DevicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Device(_message.Message):
    __slots__ = ("uuid", "healthy", "xid", "model", "parent", "profile", "index", "start")
    UUID_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    XID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    healthy: bool
    xid: int
    model: str
    parent: str
    profile: str
    index: int
    start: int
    def __init__(self, uuid: _Optional[str] = ..., healthy: _Optional[bool] = ..., xid: _Optional[int] = ..., model: _Optional[str] = ..., parent: _Optional[str] = ..., profile: _Optional[str] = ..., index: _Optional[int] = ..., start: _Optional[int] = ...) -> None: ...

class MigPlacement(_message.Message):
    __slots__ = ("profile", "start")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    profile: str
    start: int
    def __init__(self, profile: _Optional[str] = ..., start: _Optional[int] = ...) -> None: ...

class ReconfigureRequest(_message.Message):
    __slots__ = ("gpu_uuid", "layout", "change_id")
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    gpu_uuid: str
    layout: _containers.RepeatedCompositeFieldContainer[MigPlacement]
    change_id: str
    def __init__(self, gpu_uuid: _Optional[str] = ..., layout: _Optional[_Iterable[_Union[MigPlacement, _Mapping]]] = ..., change_id: _Optional[str] = ...) -> None: ...

class DeviceList(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    def __init__(self, devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ...) -> None: ...

class FaultRequest(_message.Message):
    __slots__ = ("uuid", "xid")
    UUID_FIELD_NUMBER: _ClassVar[int]
    XID_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    xid: int
    def __init__(self, uuid: _Optional[str] = ..., xid: _Optional[int] = ...) -> None: ...

class Op(_message.Message):
    __slots__ = ("kind", "m", "n", "k", "dtype", "bytes", "flops", "inputs")
    KIND_FIELD_NUMBER: _ClassVar[int]
    M_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    m: int
    n: int
    k: int
    dtype: str
    bytes: int
    flops: int
    inputs: int
    def __init__(self, kind: _Optional[str] = ..., m: _Optional[int] = ..., n: _Optional[int] = ..., k: _Optional[int] = ..., dtype: _Optional[str] = ..., bytes: _Optional[int] = ..., flops: _Optional[int] = ..., inputs: _Optional[int] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("id", "open", "malloc", "free", "launch", "synchronize", "usage", "fault")
    ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    MALLOC_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    SYNCHRONIZE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FAULT_FIELD_NUMBER: _ClassVar[int]
    id: int
    open: Open
    malloc: Malloc
    free: Free
    launch: Launch
    synchronize: Synchronize
    usage: Usage
    fault: InjectFault
    def __init__(self, id: _Optional[int] = ..., open: _Optional[_Union[Open, _Mapping]] = ..., malloc: _Optional[_Union[Malloc, _Mapping]] = ..., free: _Optional[_Union[Free, _Mapping]] = ..., launch: _Optional[_Union[Launch, _Mapping]] = ..., synchronize: _Optional[_Union[Synchronize, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., fault: _Optional[_Union[InjectFault, _Mapping]] = ...) -> None: ...

class Open(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class Malloc(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ...) -> None: ...

class Free(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: int
    def __init__(self, handle: _Optional[int] = ...) -> None: ...

class Launch(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[Op]
    def __init__(self, ops: _Optional[_Iterable[_Union[Op, _Mapping]]] = ...) -> None: ...

class Synchronize(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Usage(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InjectFault(_message.Message):
    __slots__ = ("xid",)
    XID_FIELD_NUMBER: _ClassVar[int]
    xid: int
    def __init__(self, xid: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "field", "allowed", "quota", "used", "requested")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    field: str
    allowed: _containers.RepeatedScalarFieldContainer[str]
    quota: int
    used: int
    requested: int
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., field: _Optional[str] = ..., allowed: _Optional[_Iterable[str]] = ..., quota: _Optional[int] = ..., used: _Optional[int] = ..., requested: _Optional[int] = ...) -> None: ...

class Opened(_message.Message):
    __slots__ = ("context", "device_uuid", "model", "mem_total", "mem_limit", "sms", "visible_sms", "sharing", "time_dilation", "priority", "compute_share", "dtypes")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_UUID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEM_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SMS_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_SMS_FIELD_NUMBER: _ClassVar[int]
    SHARING_FIELD_NUMBER: _ClassVar[int]
    TIME_DILATION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_SHARE_FIELD_NUMBER: _ClassVar[int]
    DTYPES_FIELD_NUMBER: _ClassVar[int]
    context: int
    device_uuid: str
    model: str
    mem_total: int
    mem_limit: int
    sms: int
    visible_sms: int
    sharing: str
    time_dilation: float
    priority: int
    compute_share: float
    dtypes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, context: _Optional[int] = ..., device_uuid: _Optional[str] = ..., model: _Optional[str] = ..., mem_total: _Optional[int] = ..., mem_limit: _Optional[int] = ..., sms: _Optional[int] = ..., visible_sms: _Optional[int] = ..., sharing: _Optional[str] = ..., time_dilation: _Optional[float] = ..., priority: _Optional[int] = ..., compute_share: _Optional[float] = ..., dtypes: _Optional[_Iterable[str]] = ...) -> None: ...

class Allocated(_message.Message):
    __slots__ = ("handle", "device_bytes", "host_bytes")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOST_BYTES_FIELD_NUMBER: _ClassVar[int]
    handle: int
    device_bytes: int
    host_bytes: int
    def __init__(self, handle: _Optional[int] = ..., device_bytes: _Optional[int] = ..., host_bytes: _Optional[int] = ...) -> None: ...

class Freed(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ...) -> None: ...

class Launched(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    def __init__(self, accepted: _Optional[int] = ...) -> None: ...

class Synchronized(_message.Message):
    __slots__ = ("completed", "virtual_time")
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_TIME_FIELD_NUMBER: _ClassVar[int]
    completed: int
    virtual_time: float
    def __init__(self, completed: _Optional[int] = ..., virtual_time: _Optional[float] = ...) -> None: ...

class UsageReply(_message.Message):
    __slots__ = ("device_bytes", "host_bytes", "quota_bytes", "launched", "completed", "pending", "alive", "lost_reason", "progress_rate", "virtual_time")
    DEVICE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOST_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    LOST_REASON_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_RATE_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_TIME_FIELD_NUMBER: _ClassVar[int]
    device_bytes: int
    host_bytes: int
    quota_bytes: int
    launched: int
    completed: int
    pending: int
    alive: bool
    lost_reason: str
    progress_rate: float
    virtual_time: float
    def __init__(self, device_bytes: _Optional[int] = ..., host_bytes: _Optional[int] = ..., quota_bytes: _Optional[int] = ..., launched: _Optional[int] = ..., completed: _Optional[int] = ..., pending: _Optional[int] = ..., alive: _Optional[bool] = ..., lost_reason: _Optional[str] = ..., progress_rate: _Optional[float] = ..., virtual_time: _Optional[float] = ...) -> None: ...

class Faulted(_message.Message):
    __slots__ = ("killed",)
    KILLED_FIELD_NUMBER: _ClassVar[int]
    killed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, killed: _Optional[_Iterable[int]] = ...) -> None: ...

class SessionReply(_message.Message):
    __slots__ = ("id", "error", "opened", "allocated", "freed", "launched", "synchronized", "usage", "faulted")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OPENED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    FREED_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    SYNCHRONIZED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FAULTED_FIELD_NUMBER: _ClassVar[int]
    id: int
    error: Error
    opened: Opened
    allocated: Allocated
    freed: Freed
    launched: Launched
    synchronized: Synchronized
    usage: UsageReply
    faulted: Faulted
    def __init__(self, id: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., opened: _Optional[_Union[Opened, _Mapping]] = ..., allocated: _Optional[_Union[Allocated, _Mapping]] = ..., freed: _Optional[_Union[Freed, _Mapping]] = ..., launched: _Optional[_Union[Launched, _Mapping]] = ..., synchronized: _Optional[_Union[Synchronized, _Mapping]] = ..., usage: _Optional[_Union[UsageReply, _Mapping]] = ..., faulted: _Optional[_Union[Faulted, _Mapping]] = ...) -> None: ...
