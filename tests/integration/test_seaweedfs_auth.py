"""The SeaweedFS that ``sluice cluster up`` and the tests start (sluice.launch.seaweedfs)
serves nothing without credentials: anonymous S3 requests are refused with 403, and the
filer's own HTTP API, which bypasses S3's identities, refuses requests without its JWT,
while the S3 keys the brokers are given read and write as before."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.fixtures.s3 import S3Server


def _status(method: str, url: str, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture
def weed(s3_server: S3Server) -> S3Server:
    if s3_server.local is None:
        pytest.skip(f"the S3 server is {s3_server.source}, not a local SeaweedFS")
    return s3_server


def test_anonymous_requests_are_refused_and_the_keys_work(weed: S3Server) -> None:
    bucket = weed.new_bucket()
    client = weed.client()
    client.put_object(Bucket=bucket, Key="secret", Body=b"payload")
    s3 = weed.endpoint_url

    # S3 without a signature: AccessDenied, as S3 answers.
    assert _status("GET", f"{s3}/") == 403
    assert _status("GET", f"{s3}/{bucket}") == 403
    assert _status("GET", f"{s3}/{bucket}/secret") == 403
    assert _status("PUT", f"{s3}/{bucket}/anonymous", b"x") == 403
    assert _status("DELETE", f"{s3}/{bucket}/secret") == 403
    assert _status("PUT", f"{s3}/anonymous-bucket") == 403

    # The filer's HTTP API on the same host: the same objects, without the JWT weed signs.
    assert weed.local is not None
    filer = f"http://127.0.0.1:{weed.local.ports['filer']}/buckets/{bucket}"
    assert _status("GET", f"{filer}/secret") == 401
    assert _status("GET", f"{filer}/") == 401
    assert _status("PUT", f"{filer}/anonymous", b"x") == 401
    assert _status("DELETE", f"{filer}/secret") == 401

    # The configured keys: everything works, and nothing anonymous got through.
    assert client.get_object(Bucket=bucket, Key="secret")["Body"].read() == b"payload"
    client.put_object(Bucket=bucket, Key="second", Body=b"more")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["second", "secret"]
