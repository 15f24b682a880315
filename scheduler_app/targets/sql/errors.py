"""The errors of SQL jobs: a refused entry or parameter (InvalidSql, naming the field), and a
database's refusal classified (StatementError: deadlock, statement_timeout, syntax_error, ...,
and whether another attempt may succeed)."""

from __future__ import annotations

from scheduler_app.targets import params

INT64 = 2**63


class InvalidSql(params.FieldError):
    """A statement's entry, or a job's parameters for it, are refused; ``field`` names what."""


class StatementError(Exception):
    """The database refused or interrupted the statement. ``kind`` names the class of
    failure (deadlock, statement_timeout, syntax_error, ...); ``retryable`` says whether
    another attempt may succeed."""

    def __init__(self, kind: str, detail: str, *, retryable: bool):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.retryable = retryable


# PostgreSQL SQLSTATEs: exact codes first, then classes (the first two characters).
PG_CODES = {
    "40001": ("serialization_failure", True),
    "40P01": ("deadlock", True),
    "55P03": ("lock_timeout", True),
    "57014": ("statement_timeout", True),
    "25006": ("read_only_transaction", False),
    "42501": ("permission_denied", False),
    "42601": ("syntax_error", False),
    "42P01": ("undefined_object", False),
    "42703": ("undefined_object", False),
    "42883": ("undefined_object", False),
    "42704": ("undefined_object", False),
    "3F000": ("undefined_object", False),
}


PG_CLASSES = {
    "08": ("connection_error", True),
    "40": ("transaction_rollback", True),
    "53": ("insufficient_resources", True),
    "57": ("server_shutdown", True),
    "58": ("system_error", True),
    "XX": ("internal_error", True),
    "0A": ("not_supported", False),
    "21": ("cardinality_violation", False),
    "22": ("data_error", False),
    "23": ("integrity_error", False),
    "25": ("invalid_transaction_state", False),
    "28": ("invalid_authorization", False),
    "2B": ("dependent_objects", False),
    "3D": ("undefined_object", False),
    "42": ("syntax_or_access_error", False),
    "44": ("check_option_violation", False),
}


# MariaDB / MySQL error numbers.
MYSQL_CODES = {
    1213: ("deadlock", True),
    1205: ("lock_timeout", True),
    1020: ("serialization_failure", True),
    1969: ("statement_timeout", True),
    3024: ("statement_timeout", True),
    1317: ("interrupted", True),
    1040: ("connection_error", True),
    1053: ("connection_error", True),
    1927: ("connection_error", True),
    4031: ("connection_error", True),
    1792: ("read_only_transaction", False),
    1064: ("syntax_error", False),
    1149: ("syntax_error", False),
    1044: ("permission_denied", False),
    1045: ("permission_denied", False),
    1142: ("permission_denied", False),
    1143: ("permission_denied", False),
    1227: ("permission_denied", False),
    1370: ("permission_denied", False),
    1146: ("undefined_object", False),
    1054: ("undefined_object", False),
    1305: ("undefined_object", False),
    1049: ("undefined_object", False),
    1051: ("undefined_object", False),
    1630: ("undefined_object", False),
    1048: ("data_error", False),
    1264: ("data_error", False),
    1265: ("data_error", False),
    1292: ("data_error", False),
    1366: ("data_error", False),
    1406: ("data_error", False),
    1690: ("data_error", False),
    1062: ("integrity_error", False),
    1216: ("integrity_error", False),
    1217: ("integrity_error", False),
    1451: ("integrity_error", False),
    1452: ("integrity_error", False),
    4025: ("integrity_error", False),
}


def classify_error(exc: BaseException, vendor: str) -> StatementError:
    """A driver's (or Django's wrapped) database error as a StatementError."""
    cause = exc.__cause__ if exc.__cause__ is not None and type(exc).__module__.startswith("django.") else exc
    message = " ".join(str(cause).split())[:1000] or type(cause).__name__
    if vendor == "postgresql":
        code = getattr(cause, "sqlstate", None)
        if code:
            kind, retryable = PG_CODES.get(code) or PG_CLASSES.get(code[:2]) or _by_class(cause)
            return StatementError(kind, f"SQLSTATE {code}: {message}", retryable=retryable)
    else:
        args: tuple = getattr(cause, "args", ())
        code = args[0] if args and params.is_int(args[0]) else None
        if code is not None:
            # 2000-2999: the client library's own errors (server gone away, lost connection...).
            kind, retryable = MYSQL_CODES.get(code) or (
                ("connection_error", True) if 2000 <= code < 3000 else _by_class(cause)
            )
            text = args[1] if len(args) > 1 else message
            return StatementError(kind, f"error {code}: {text}", retryable=retryable)
    kind, retryable = _by_class(cause)
    if retryable and vendor == "postgresql":  # no SQLSTATE: libpq could not reach or lost the server
        kind = "connection_error"
    return StatementError(kind, message, retryable=retryable)


def _by_class(exc: BaseException) -> tuple[str, bool]:
    """By the DB-API exception class: OperationalError (the connection, the server's
    state) may pass; the rest (programming, data, integrity errors) will not."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "OperationalError" in names or "InterfaceError" in names:
        return "database_error", True
    return "database_error", False
