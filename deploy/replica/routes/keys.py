"""``/admin/keys``: create, list and revoke client API keys of the signals API (admin token).

The key is returned once, at creation; the store keeps only its salted HMAC
(deploy/replica/api_keys.py).
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, status

from deploy.replica.api import ApiKeyCreated, ApiKeyCreateRequest, ApiKeyInfo
from deploy.replica.deps import AdminDep

router = APIRouter(prefix="/admin/keys", tags=["admin"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ApiKeyCreated)
def create_key(body: ApiKeyCreateRequest, _: AdminDep, request: Request) -> ApiKeyCreated:
    key_id, key = request.app.state.api_keys.create(body.name, body.org)
    return ApiKeyCreated(key_id=key_id, name=body.name, org=body.org, key=key)


@router.get("", response_model=list[ApiKeyInfo])
def list_keys(_: AdminDep, request: Request) -> list[ApiKeyInfo]:
    return [ApiKeyInfo(**k) for k in request.app.state.api_keys.list()]


@router.delete("/{key_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_key(key_id: str, _: AdminDep, request: Request) -> None:
    if not request.app.state.api_keys.revoke(key_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"key_id: no key {key_id!r}")
