"""A warm ClientApp for a SuperNode: ``fedpd flower clientapp``, one long-lived process beside a
SuperNode started with ``--isolation process``, that serves every message of every run.

By default (``--isolation subprocess``) a SuperNode's helper starts a fresh ``flwr-clientapp``
process for each message: Python, torch and fedpd are imported and the run's problem is built
(its data read) again for every message, seconds each time, whatever the model. With
``--isolation process`` the SuperNode starts no helper and waits for one to claim its work on
its Runtime API (the SuperNode's ``--port``); this process claims each ClientApp task there and
runs fedpd's ClientApp (:mod:`fedpd.flower.clientapp`) in itself, so imports are paid once per
process and a run's problem, algorithm and data once per run (:mod:`fedpd.remote.node` keeps
them for the run in progress only, keyed by its run key). The clients' states stay where they
always are, in the node's file store; Flower's ``Context`` goes back to the SuperNode as the
ClientApp left it. Tasks are served one at a time, as a SuperNode hands them out.

It runs only fedpd's ClientApp: a run whose app names another ClientApp gets an error reply and
its task fails, as a ClientApp that cannot be loaded does. Flower's Runtime API has no version
promise; this follows the Flower ``pyproject.toml`` pins (1.42; 1.41's is the same).

Each task is served in a thread of its own while the loop keeps watch: a task whose message does
not arrive is left waiting (after :data:`STUCK_S`) and the next task is served. That happens when
the SuperLink restarts during a run: the SuperNode makes a task of a message of the stopped run,
whose content it can no longer fetch, and Flower waits for it for up to two hours — the node
would serve nothing else. A SIGTERM stops the loop at once; a task that is running finishes first.
This process holds its node's ``store-dir`` lock while it serves (:mod:`fedpd.remote.storelock`)
and removes it when it stops.
"""

from __future__ import annotations

import signal
import sys
import threading

#: the ClientApp component this process runs (the one ``fedpd flower app`` writes)
CLIENTAPP = "fedpd.flower.clientapp:client_app"
_LAST_RUN: list[int] = []  # the Flower run id of the last task served (for the log only)
#: seconds a claimed task may wait for its message before the next task is served beside it
STUCK_S = 10.0


def _client(address: str, root_certificates: str | None, interceptors: list, retry: bool = True):
    """A Runtime API client that retries only lost connections, briefly (``retry``), or never
    (Flower's own retry policy interrupts the whole process on some refusals: fine for a process
    that serves one task, not for this one)."""
    import httpx
    from flwr.supercore.retry.retry_invoker import RetryInvoker, exponential
    from flwr.supercore.runtime import RuntimeHttpClient

    retry = (RetryInvoker(lambda: exponential(max_delay=2), httpx.TransportError, max_tries=10, max_time=30)
             if retry else None)
    return RuntimeHttpClient.from_server_address(address, insecure=root_certificates is None,
                                                 root_certificates=root_certificates, interceptors=interceptors,
                                                 retry_invoker=retry)


def _app(component: str):
    """The ClientApp object ``component`` (``module:attribute``) names."""
    import importlib

    module, _, attribute = component.partition(":")
    return getattr(importlib.import_module(module), attribute)


def serve_task(address: str, token: str, root_certificates: str | None = None,
               arrived: threading.Event | None = None, component: str = CLIENTAPP) -> str:
    """Serve the claimed task of ``token``: pull its message and context, run fedpd's ClientApp
    here, push the reply and the context back (``arrived`` is set once the message is here).
    Returns Flower's sub-status of the task. (``component``: another ClientApp, for
    benchmarks/deployment_rounds.py's plain Flower app; ``fedpd flower clientapp`` runs fedpd's.)"""
    from flwr.app import Message
    from flwr.app.error import Error
    from flwr.common.config import get_fab_config
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.proto.runtime_pb2 import SendTaskHeartbeatRequest
    from flwr.supercore.heartbeat import HeartbeatSender
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

    client_app = _app(component)

    client = _client(address, root_certificates, [RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                                                  RuntimeTokenHttpInterceptor(token)])

    def beat() -> bool:  # a refused heartbeat (task over) ends nothing here but this task's beats
        try:
            client.SendTaskHeartbeat(SendTaskHeartbeatRequest())
        except Exception:
            return False
        return True

    heartbeat = HeartbeatSender(beat)
    message = context = reply = None
    status, details = SubStatus.FAILED, "the warm fedpd ClientApp failed"
    try:
        heartbeat.start()
        message, context, run, fab = pull_task_input(client)
        if arrived is not None:
            arrived.set()
        if _LAST_RUN != [run.run_id]:  # one line whenever another run's messages start coming
            _LAST_RUN[:] = [run.run_id]
            print(f"fedpd flower clientapp: serving run {run.run_id}", file=sys.stderr, flush=True)
        named = get_fab_config(fab.content)["tool"]["flwr"]["app"]["components"].get("clientapp")
        if named != component:
            details = (f"fedpd flower clientapp runs only {component}; run {run.run_id}'s app names {named!r} "
                       f"(start this SuperNode with --isolation subprocess for other apps)")
            reply = Message(Error(code=ErrorCode.LOAD_CLIENT_APP_EXCEPTION, reason=details), reply_to=message)
        else:
            reply = client_app(message=message, context=context)
            status, details = SubStatus.COMPLETED, ""
    except Exception as err:  # this task fails (the server counts it lost or rejected); the process goes on
        details = f"{type(err).__name__}: {err}"[:500]
        if message is not None:
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details), reply_to=message)
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
            push_task_output(client=client, context=context, sub_status=status, details=details)
        except Exception as err:
            details = details or f"{type(err).__name__}: {err}"
        if heartbeat.is_running:
            heartbeat.stop()
        client.close()
    if details:
        print(f"fedpd flower clientapp: task failed: {details}", file=sys.stderr, flush=True)
    return status


class _Task:
    """A claimed task, served in a thread of its own."""

    def __init__(self, address: str, token: str, root_certificates: str | None, component: str):
        import time

        self.arrived, self.since = threading.Event(), time.monotonic()
        self.thread = threading.Thread(target=serve_task, args=(address, token, root_certificates, self.arrived,
                                                                component), daemon=True, name="fedpd-task")
        self.thread.start()

    def waits_for_its_message(self) -> float:
        """Seconds it has waited for its message (0 once it arrived, or the task is over)."""
        import time

        return 0.0 if self.arrived.is_set() or not self.thread.is_alive() else time.monotonic() - self.since


def serve(address: str, root_certificates: str | None = None, poll: float = 0.1,
          stop: threading.Event | None = None, component: str = CLIENTAPP) -> None:
    """Claim and serve the SuperNode's ClientApp tasks at ``address`` until ``stop`` is set (or
    SIGTERM / SIGINT; a task in progress finishes). A SuperNode that is not (or no longer)
    reachable is waited for: one that restarts on the same port is served again."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor

    _app(component)  # torch, fedpd, Flower: imported once, before the first task

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    client = _client(address, root_certificates, [RuntimeVersionHttpInterceptor(component_name="SuperExec")],
                     retry=False)  # this loop waits and asks again
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    waiting, current = False, None
    print(f"fedpd flower clientapp: serving the SuperNode at {address}", file=sys.stderr, flush=True)
    try:
        while not stop.is_set():
            if current is not None and current.thread.is_alive() and current.waits_for_its_message() < STUCK_S:
                stop.wait(poll)  # one task at a time, unless it waits for a message that does not come
                continue
            try:
                claimed = client.AcquireTask(request)
            except Exception as err:  # the SuperNode is not there (yet, or any more): wait for it
                if not waiting:
                    print(f"fedpd flower clientapp: no SuperNode at {address} ({type(err).__name__}); waiting",
                          file=sys.stderr, flush=True)
                waiting = True
                stop.wait(1.0)
                continue
            if waiting:
                print(f"fedpd flower clientapp: serving the SuperNode at {address}", file=sys.stderr, flush=True)
                waiting = False
            if claimed.HasField("task") and claimed.token:
                if current is not None and current.thread.is_alive():
                    print(f"fedpd flower clientapp: a task has waited {current.waits_for_its_message():.0f} s for "
                          f"its message (one of a run that stopped?); serving the next task meanwhile",
                          file=sys.stderr, flush=True)
                current = _Task(address, claimed.token, root_certificates, component)
            else:
                stop.wait(poll)
        if current is not None and current.arrived.is_set():
            current.thread.join()  # a task in progress finishes (its reply goes back)
    finally:
        client.close()
        from fedpd.remote.storelock import release

        release()  # the node's store-dir is free at once (a later process takes it without a notice)
