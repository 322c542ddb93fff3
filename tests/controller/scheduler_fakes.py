"""The scheduler's two outlets, faked for unit tests: the API session (every call recorded, each answered
201) and the event recorder (every Event recorded as (pod, reason, type, message))."""
from fgpu_operator.kube.outcome import Outcome, Result


class FakeApi:
    def __init__(self):
        self.calls = []

    async def request(self, method, path, **kw):
        self.calls.append((method, path, kw.get("body")))
        return Outcome(Result.OK, 201)


class FakeEvents:
    def __init__(self):
        self.emitted = []

    async def emit(self, namespace, name, uid, reason, message, type="Warning"):
        self.post(namespace, name, uid, reason, message, type)

    def post(self, namespace, name, uid, reason, message, type="Warning"):
        self.emitted.append((name, reason, type, message))
        return True

    def forget(self, uid):
        pass

    @property
    def messages(self) -> list[tuple[str, str, str]]:
        """(pod, reason, message) of each Event."""
        return [(name, reason, message) for name, reason, _, message in self.emitted]
