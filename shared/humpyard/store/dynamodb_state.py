"""The ``OverrideStore`` and ``QuotaStore`` halves of ``DynamoDBStore``.

Overrides live in the state table's ``override`` partition (one Query lists
them all; expired ones are filtered by ``expires_at > now`` because TTL
deletion runs late), ids come from an atomic counter item, and every change
that has an audit entry commits with it in one transaction. A creation or a
removal also adds one to ``ov`` on the live item in the same transaction, so
an instance that reads the live item anyway (``read_shared``) lists the
overrides again only when they changed. The audit trail and quota history
live in the ledger table, keyed by time.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.errors import ConflictError
from humpyard.planning.types import Override
from humpyard.store.dynamodb_base import (
    Cancelled,
    ConditionFailed,
    DynamoDBBase,
    Item,
    N,
    S,
    as_float,
    as_int,
    as_str,
    key_of,
    ts_key,
)
from humpyard.store.dynamodb_live import LIVE_KEY, OVERRIDES_VERSION
from humpyard.store.dynamodb_schema import TTL_ATTRIBUTE
from humpyard.store.rows import audit_entry, override_as_stored, quota_sample, to_json

_OVERRIDES = S("override")
_COUNTER_KEY: Item = {"pk": S("counter"), "sk": S("override")}


def _override_key(oid: str) -> Item:
    return {"pk": _OVERRIDES, "sk": S(oid)}


def _override(item: Item) -> Override:
    data = json.loads(as_str(item, "body") or "{}")
    return Override(id=data["id"], kind=data["kind"], subject=data["subject"],
                    target=data.get("target"), reason=data.get("reason") or "",
                    created_at=float(data["created_at"]), expires_at=float(data["expires_at"]),
                    created_by=data.get("created_by"))


def _creation_order(item: Item) -> tuple[float, int]:
    return as_float(item, "created_at"), as_int(item, "seq")


class DynamoDBOverrides(DynamoDBBase):
    """Overrides and their audit trail."""

    has_ledger = True

    def _counter(self, *names: str) -> dict[str, int]:
        """Atomically add one to each named counter; their new values."""
        answer = self._call(
            "update_item", TableName=self.state_table, Key=_COUNTER_KEY,
            UpdateExpression="ADD " + ", ".join(f"#{n} :one" for n in names),
            ExpressionAttributeNames={f"#{n}": n for n in names},
            ExpressionAttributeValues={":one": N(1)}, ReturnValues="UPDATED_NEW")
        return {n: as_int(answer.get("Attributes", {}), n) for n in names}

    def create_override(self, ov: Override) -> Override:
        counters = self._counter("seq") if ov.id else self._counter("seq", "next_id")
        new_id = ov.id or str(counters["next_id"])
        while True:
            stored = override_as_stored(ov, new_id)
            body = stored.to_dict()
            del body["stale"]
            try:
                self._call("transact_write_items", TransactItems=[
                    {"Put": {"TableName": self.state_table, "Item": {
                        **_override_key(new_id), "body": S(to_json(body)),
                        "created_at": N(stored.created_at), "expires_at": N(stored.expires_at),
                        "seq": N(counters["seq"]), "expiry_audited": {"BOOL": False},
                        TTL_ATTRIBUTE: self._expiry(stored.expires_at)},
                        "ConditionExpression": "attribute_not_exists(pk)"}},
                    self._bump_overrides_version()])
                return stored
            except Cancelled:
                if ov.id:
                    raise ConflictError(f"override {ov.id} already exists") from None
                new_id = str(self._counter("next_id")["next_id"])  # taken by an explicit id

    def _override_items(self, filter_expr: str | None = None,
                        values: dict[str, Any] | None = None) -> list[Item]:
        kwargs: dict[str, Any] = {"TableName": self.state_table, "ConsistentRead": True,
                                  "KeyConditionExpression": "pk = :pk",
                                  "ExpressionAttributeValues": {":pk": _OVERRIDES,
                                                                **(values or {})}}
        if filter_expr:
            kwargs["FilterExpression"] = filter_expr
        return sorted(self._query(**kwargs), key=_creation_order)

    def list_overrides(self, now: float, *, include_expired: bool = False) -> list[Override]:
        if include_expired:
            return [_override(i) for i in self._override_items()]
        return [_override(i) for i in self._override_items("expires_at > :now",
                                                           {":now": N(now)})]

    def delete_override(self, id: str, *, by: str | None, now: float) -> Override | None:
        found = self._call("get_item", TableName=self.state_table, Key=_override_key(id),
                           ConsistentRead=True).get("Item")
        if found is None:
            return None
        ov = _override(found)
        try:
            self._call("transact_write_items", TransactItems=[
                {"Delete": {"TableName": self.state_table, "Key": _override_key(id),
                            "ConditionExpression": "attribute_exists(pk)"}},
                {"Put": {"TableName": self.ledger_table,
                         "Item": self._audit_item(audit_entry("remove", ov, by, now))}},
                self._bump_overrides_version()])
        except Cancelled:
            return None  # removed by someone else meanwhile; theirs is the audit entry
        return ov

    def _bump_overrides_version(self) -> dict[str, Any]:
        """The transaction item that tells readers of the live item the overrides changed."""
        return {"Update": {"TableName": self.state_table, "Key": LIVE_KEY,
                           "UpdateExpression": "ADD #ov :one",
                           "ExpressionAttributeNames": {"#ov": OVERRIDES_VERSION},
                           "ExpressionAttributeValues": {":one": N(1)}}}

    def _audit_item(self, entry: dict[str, Any]) -> Item:
        return {"pk": S("audit"), "sk": S(self._seq.key(entry["ts"])), "ts": N(entry["ts"]),
                "body": S(to_json(entry)), TTL_ATTRIBUTE: self._expiry(entry["ts"])}

    def audit(self, action: str, override: Override, by: str | None, now: float) -> None:
        item = self._audit_item(audit_entry(action, override, by, now))
        self._call("put_item", TableName=self.ledger_table, Item=item)

    def list_audit(self, limit: int = 100) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        page = self._call("query", TableName=self.ledger_table, ConsistentRead=True,
                          KeyConditionExpression="pk = :pk",
                          ExpressionAttributeValues={":pk": S("audit")},
                          ScanIndexForward=False, Limit=limit)
        return [json.loads(as_str(i, "body") or "{}") for i in page.get("Items", [])]

    def expire_due(self, now: float) -> list[Override]:
        due = self._override_items("expires_at <= :now AND expiry_audited = :no",
                                   {":now": N(now), ":no": {"BOOL": False}})
        won: list[Override] = []
        for item in due:
            ov = _override(item)
            try:
                self._call("transact_write_items", TransactItems=[
                    {"Update": {"TableName": self.state_table, "Key": key_of(item),
                                "UpdateExpression": "SET expiry_audited = :yes",
                                "ConditionExpression": "expiry_audited = :no",
                                "ExpressionAttributeValues": {":yes": {"BOOL": True},
                                                              ":no": {"BOOL": False}}}},
                    {"Put": {"TableName": self.ledger_table, "Item": self._audit_item(
                        audit_entry("expire", ov, None, ov.expires_at))}}])
            except Cancelled:
                continue  # another caller recorded this expiry
            won.append(ov)
        return won

    def _purge_overrides(self, before: float) -> None:
        gone = self._override_items("expires_at < :before", {":before": N(before)})
        self._delete_keys(self.state_table, [key_of(i) for i in gone])
        self._delete_keys(self.ledger_table, [key_of(i) for i in self._query(
            TableName=self.ledger_table, ProjectionExpression="pk, sk",
            KeyConditionExpression="pk = :pk AND sk < :c",
            ExpressionAttributeValues={":pk": S("audit"), ":c": S(ts_key(before))})])


class DynamoDBQuota(DynamoDBBase):
    """Quota snapshots (state table) and history (ledger table, with the newest per window)."""

    def put_quota_snapshot(self, provider: str, snapshot: dict[str, Any]) -> None:
        body = to_json(snapshot)
        self._call("put_item", TableName=self.state_table,
                   Item={"pk": S("quota"), "sk": S(provider), "body": S(body)})

    def get_quota_snapshots(self) -> dict[str, dict[str, Any]]:
        return {as_str(i, "sk") or "": json.loads(as_str(i, "body") or "{}")
                for i in self._query(TableName=self.state_table, ConsistentRead=True,
                                     KeyConditionExpression="pk = :pk",
                                     ExpressionAttributeValues={":pk": S("quota")})}

    def append_quota_history(self, sample: dict[str, Any]) -> None:
        provider, window, ts, body = quota_sample(sample)
        common: Item = {"provider": S(provider), "window": S(window), "ts": N(ts),
                        "body": S(body), TTL_ATTRIBUTE: self._expiry(ts)}
        self._call("put_item", TableName=self.ledger_table,
                   Item={"pk": S("quotahist"), "sk": S(self._seq.key(ts)), **common})
        try:
            self._call("put_item", TableName=self.ledger_table,
                       Item={"pk": S("quotalast"), "sk": S(to_json([provider, window])),
                             **common},
                       ConditionExpression="attribute_not_exists(pk) OR #ts <= :ts",
                       ExpressionAttributeNames={"#ts": "ts"},
                       ExpressionAttributeValues={":ts": N(ts)})
        except ConditionFailed:
            pass  # a newer sample of this window is already the last one

    def list_quota_history(
        self, provider: str | None = None, since: float | None = None, limit: int = 500,
    ) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        cond = "pk = :pk"
        values: dict[str, Any] = {":pk": S("quotahist")}
        if since is not None:
            cond += " AND sk >= :since"
            values[":since"] = S(ts_key(since))
        kwargs: dict[str, Any] = {"TableName": self.ledger_table, "ConsistentRead": True,
                                  "KeyConditionExpression": cond, "ScanIndexForward": False,
                                  "Limit": limit}
        if provider is not None:
            kwargs["FilterExpression"] = "provider = :p"
            values[":p"] = S(provider)
        kwargs["ExpressionAttributeValues"] = values
        out: list[dict[str, Any]] = []
        for item in self._query(**kwargs):
            out.append(json.loads(as_str(item, "body") or "{}"))
            if len(out) >= limit:
                break
        return out

    def last_quota_sample(self, provider: str, window: str) -> dict[str, Any] | None:
        found = self._call("get_item", TableName=self.ledger_table, ConsistentRead=True,
                           Key={"pk": S("quotalast"), "sk": S(to_json([provider, window]))})
        item = found.get("Item")
        return None if item is None else json.loads(as_str(item, "body") or "{}")

    def _purge_quota(self, before: float) -> None:
        old = [key_of(i) for i in self._query(
            TableName=self.ledger_table, ProjectionExpression="pk, sk",
            KeyConditionExpression="pk = :pk AND sk < :c",
            ExpressionAttributeValues={":pk": S("quotahist"), ":c": S(ts_key(before))})]
        old += [key_of(i) for i in self._query(
            TableName=self.ledger_table, ConsistentRead=True,
            KeyConditionExpression="pk = :pk", FilterExpression="#ts < :before",
            ExpressionAttributeNames={"#ts": "ts"},
            ExpressionAttributeValues={":pk": S("quotalast"), ":before": N(before)})]
        self._delete_keys(self.ledger_table, old)
