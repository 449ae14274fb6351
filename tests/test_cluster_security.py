"""The local dask cluster is authenticated (issue 33): TLS with credentials made for the run,
every listener on the loopback unless a profile says otherwise, and a dashboard address that
is printed only when it answers."""

from __future__ import annotations

import pandas as pd
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

from conftest import TOY, run_cli, toy_study, write_study
from dse.execution.dask_cluster import DaskExecutor, dashboard_problem, run_credentials
from dse.execution.plan import ExecutionPlan, plan_execution
from dse.study import EvaluatorSpec, ExecutionSpec


def _executor(plan: ExecutionPlan, notes: list | None = None) -> DaskExecutor:
    return DaskExecutor(
        EvaluatorSpec(name=TOY), plan, notify=(notes.append if notes is not None else None)
    )


def _refused(address: str, security: Security | None = None) -> None:
    """A connection with other credentials, or none, cannot be made to ``address``: dask's
    own ``connect`` (its TLS handshake and its greeting) in a loop of this call's own (a
    ``Client`` per attempt started an event-loop thread each, one of which now and then
    missed dask's 10 s start-up wait and failed the test with dask's internal assertion)."""
    import asyncio

    from distributed.comm import connect

    args = security.get_connection_args("client") if security is not None else {}

    async def attempt() -> None:
        comm = await connect(address, timeout=3, **args)
        await comm.close()  # (reached only where a stranger was let in: the test fails)

    with pytest.raises((OSError, TypeError, ValueError)):
        asyncio.run(attempt())


def test_a_local_cluster_speaks_tls_on_the_loopback_and_refuses_strangers():
    with _executor(ExecutionPlan(workers=1, dashboard=False)) as ex:
        scheduler = ex.client.scheduler.address
        workers = list(ex.client.scheduler_info()["workers"])
        assert scheduler.startswith("tls://127.0.0.1:"), scheduler
        assert workers and all(w.startswith("tls://127.0.0.1:") for w in workers), workers
        out = ex.evaluate(pd.DataFrame({"x": [0.1], "y": 0, "shape": "a"}))
        assert list(out["status"]) == ["ok"]  # this run's own client is let in
        # another user of the machine: credentials of their own, or none at all
        _refused(scheduler, security=Security.temporary())
        _refused(scheduler)
        _refused(workers[0], security=Security.temporary())


def test_execution_tls_false_is_plain_tcp(tmp_path):
    study = toy_study(output=str(tmp_path / "out"))
    study["execution"] = {"workers": 1, "tls": False, "dashboard": False}
    import dse

    plan = plan_execution(dse.load_study(write_study(tmp_path, study)).execution)
    assert plan.tls is False
    with _executor(plan) as ex:
        assert ex.client.scheduler.address.startswith("tcp://127.0.0.1:")


def test_a_profile_sets_the_address_a_local_cluster_listens_on(tmp_path):
    (tmp_path / "here.yaml").write_text("workers: 1\n")
    (tmp_path / "there.yaml").write_text("workers: 1\nhost: 0.0.0.0\n")
    assert plan_execution(ExecutionSpec(profile=str(tmp_path / "here.yaml"))).host == "127.0.0.1"
    assert plan_execution(ExecutionSpec(profile=str(tmp_path / "there.yaml"))).host == "0.0.0.0"


def test_a_dashboard_that_does_not_answer_is_not_printed_as_one(tmp_path):
    """A scheduler without a dashboard (no bokeh there) answers 404 at /status: ``--scheduler``
    says so instead of printing an address that does not work."""
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},  # its HTTP server serves /health, no pages
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            link = client.dashboard_link
        assert "HTTP 404" in dashboard_problem(link)
        study = write_study(tmp_path, toy_study(output=str(tmp_path / "out")))
        proc = run_cli("run", study, "--scheduler", cluster.scheduler_address, "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert f"no dask dashboard at {link}: it answers HTTP 404" in proc.stderr, proc.stderr
    assert "dask dashboard: http" not in proc.stderr
    assert "does not answer" in dashboard_problem("http://127.0.0.1:9/status", timeout_s=1)


def test_each_run_makes_its_own_credentials_with_a_key_that_signed_its_certificate():
    """The run's key (elliptic curve P-256) signed the certificate it presents, and a second
    run's credentials are others (a worker of one run cannot join another's cluster)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key_text, cert_text = run_credentials()
    key = serialization.load_pem_private_key(key_text.encode(), password=None)
    cert = x509.load_pem_x509_certificate(cert_text.encode())
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert cert.public_key() == key.public_key() and cert.issuer == cert.subject
    cert.public_key().verify(
        cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256())
    )  # raises when the signature is not the key's
    assert run_credentials()[0] != key_text
