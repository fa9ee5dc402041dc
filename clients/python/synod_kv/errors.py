"""The client's errors.

The important distinction is between an operation that certainly had no effect
(``Unavailable``, ``Rejected``, ``InvalidArgument``) and one whose effect is not known
(``OutcomeUnknown``): a commit or single-key write that may or may not have been applied.
"""


class KvError(Exception):
    """Base class of the client's errors."""


class InvalidArgument(KvError):
    """Refused before anything was sent: an empty key, or a key, value or transaction beyond the
    limits (``MAX_KEY_BYTES``, ``MAX_VALUE_BYTES``, ``MAX_TXN_OPS``)."""


class Rejected(KvError):
    """A server refused the request as malformed (``INVALID``) or too large (``TOO_LARGE``).
    It had no effect."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"rejected by the server ({code}): {detail}")
        self.code = code
        self.detail = detail


class Unavailable(KvError):
    """No node served the request within the retries, and it certainly had no effect."""


class OutcomeUnknown(KvError):
    """A commit, abort or single-key write was sent and its outcome could not be learned.
    For a transaction, ``commit()`` may be called again (it is idempotent) or ``abort()`` asks
    the coordinator to decide."""

    def __init__(self, detail: str, txn_id=None):
        prefix = f"outcome of transaction {txn_id} unknown" if txn_id else "outcome unknown"
        super().__init__(f"{prefix}: {detail}")
        self.txn_id = txn_id
        self.detail = detail


class TxnStateError(KvError):
    """An operation on a transaction in the wrong state (after commit or abort)."""
