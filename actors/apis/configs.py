"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Topic configs: each value with its true source (the topic's override, the
broker key the config file or a flag set, or a default), its Kafka type and,
when asked, its synonyms and documentation. Changes go to the controller,
which persists them and has the partitions' logs take them at once (in a
cluster: ``/config/topics`` and a ``/config/changes`` notification every node
applies). Broker
configs are static on actorlog (the config file and flags): described, not
altered.
"""

from __future__ import annotations

from typing import Any

from actors.apis.base import ApiGen, Call, HandlerContext, Respond
from actors.core.topic_admin import AlterConfigOp
from actors.core.topic_config import (
    NULL_DEFAULT_KEYS,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    DescribedConfig,
    InvalidTopicError,
    broker_synonyms,
    broker_value_text,
    describe_topic_configs,
    validate_topic_name,
)
from actors.runtime.config import DEFAULTS, INTERNAL_KEYS, RANGES, SPEC, Config
from wire.admin_messages import (
    AlterTopicConfigs,
    AlterTopicConfigsDone,
    AlterTopicConfigsRow,
    ConfigOpRow,
)
from wire.errors import ErrorCode

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
_INT32_MAX = 2**31 - 1
# Broker keys whose Kafka type the Python type does not tell.
_BROKER_TYPES = {"log.cleanup.policy": ConfigType.LIST, "ssl.key.password": ConfigType.PASSWORD,
                 "ssl.enabled.protocols": ConfigType.LIST, "ssl.cipher.suites": ConfigType.LIST,
                 "sasl.enabled.mechanisms": ConfigType.LIST}
# Listener lists: Kafka shows each entry with its listener name; a bare HOST:PORT (which
# actorlog takes as PLAINTEXT) is shown so.
_LISTENER_KEYS = ("listeners", "advertised.listeners")


def broker_config_type(key: str) -> ConfigType:
    """Kafka's type of a broker key: from its Python type, INT or LONG by its range."""
    if key in _BROKER_TYPES:
        return _BROKER_TYPES[key]
    kind = SPEC[key][1]
    if kind is bool:
        return ConfigType.BOOLEAN
    if kind is float:
        return ConfigType.DOUBLE
    if kind is int:
        high = RANGES.get(key, (0, _INT32_MAX))[1]
        return ConfigType.INT if high <= _INT32_MAX else ConfigType.LONG
    return ConfigType.STRING


def _named_listeners(text: str) -> str:
    return ",".join(e if "://" in e else f"PLAINTEXT://{e}"
                    for e in (e.strip() for e in text.split(",")) if e)


def _shown(key: str, text: str | None, sensitive: bool) -> str | None:
    if sensitive or text is None:
        return None
    return _named_listeners(text) if key in _LISTENER_KEYS else text


def describe_broker_configs(config: Config) -> list[DescribedConfig]:
    """Every broker key as Kafka's ConfigHelper.createBrokerConfigEntry gives it: the value
    (null for a key with no default that is not set), the source of its first synonym
    (DEFAULT_CONFIG when none) and the synonyms; a password's values are hidden. broker.id
    is node.id under Kafka's other name (Kafka's KafkaConfig.populateSynonyms), with
    Kafka's default (-1) as its DEFAULT_CONFIG synonym."""
    out = []
    for key in SPEC:
        if key in INTERNAL_KEYS and key not in config.set_keys:
            continue
        kind = broker_config_type(key)
        sensitive = kind is ConfigType.PASSWORD
        synonyms = tuple((n, _shown(n, v, sensitive), s) for n, v, s in broker_synonyms(
            key, config.given, config.set_keys, DEFAULTS))
        unset = key in NULL_DEFAULT_KEYS and key not in config.set_keys
        own = config.given.get(key, config[key])  # a set key as given, not as derived
        value = _shown(key, None if unset else broker_value_text(own), sensitive)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(DescribedConfig(key, value, source, kind, synonyms))
        if key == "node.id":
            # the default synonym is Kafka's broker.id default, -1 (Defaults.BrokerId: an id
            # ZooKeeper generates), not actorlog's node.id default
            aliased = tuple(("broker.id", "-1" if s is ConfigSource.DEFAULT_CONFIG else v, s)
                            for _n, v, s in synonyms)
            out.append(DescribedConfig("broker.id", value, source, kind, aliased))
    return out


def _documentation(key: str) -> str | None:
    if key == "broker.id":
        return SPEC["node.id"][2]
    if key in SPEC:
        return SPEC[key][2]
    broker_key = TOPIC_CONFIGS.get(key, ("", str))[0]
    if broker_key in SPEC:
        return f"{SPEC[broker_key][2]} (topic override of {broker_key})"
    return None


def _resource_error(res: Any, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message,
            "resource_type": res.resource_type, "resource_name": res.resource_name,
            "configs": []}


def _illegal_topic_name(name: str) -> str | None:
    """Why a topic resource's name can be no topic's, or None. Checked before the topic is
    looked up, as Kafka's ControllerConfigurationValidator.validateTopicName runs before
    its existence check."""
    try:
        validate_topic_name(name)
    except InvalidTopicError as e:
        return str(e)
    return None


def handle_describe_configs(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    synonyms_wanted = bool(getattr(req, "include_synonyms", False))
    docs_wanted = bool(getattr(req, "include_documentation", False))
    results = []
    for res in req.resources:
        if res.resource_type == TOPIC_RESOURCE:
            entry = ctx.topics.get(res.resource_name)
            illegal = _illegal_topic_name(res.resource_name) if entry is None else None
            if illegal is not None:
                results.append(_resource_error(res, ErrorCode.INVALID_TOPIC_EXCEPTION, illegal))
                continue
            if entry is None:
                results.append(_resource_error(res, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                               f"topic {res.resource_name!r} does not exist"))
                continue
            described = describe_topic_configs(ctx.config.values, ctx.config.set_keys,
                                               dict(entry.configs), DEFAULTS,
                                               given=ctx.config.given)
            read_only = False
        elif res.resource_type == BROKER_RESOURCE:
            if res.resource_name not in ("", str(ctx.broker_id)):
                results.append(_resource_error(
                    res, ErrorCode.INVALID_REQUEST,
                    f"this is broker {ctx.broker_id}: ask for broker {ctx.broker_id!r} or "
                    f"'' (the defaults), not {res.resource_name!r}"))
                continue
            # '' is the cluster-wide defaults' resource: Kafka answers there only the
            # dynamic defaults (DYNAMIC_DEFAULT_BROKER_CONFIG), which actorlog's static
            # broker configs never have: none (ConfigHelper.describeConfigs)
            described = (describe_broker_configs(ctx.config) if res.resource_name else [])
            read_only = True
        else:
            results.append(_resource_error(res, ErrorCode.INVALID_REQUEST,
                                           f"resource type {res.resource_type} is not "
                                           f"supported (topics: 2, brokers: 4)"))
            continue
        wanted = res.configuration_keys
        configs = []
        for c in described:
            if wanted is not None and c.name not in wanted:
                continue
            configs.append({
                "name": c.name, "value": c.value, "read_only": read_only,
                "is_default": c.source is ConfigSource.DEFAULT_CONFIG,  # v0
                "config_source": int(c.source),
                "is_sensitive": c.config_type is ConfigType.PASSWORD,
                "synonyms": ([{"name": n, "value": v, "source": int(s)} for n, v, s in c.synonyms]
                             if synonyms_wanted and version >= 1 else []),
                "config_type": int(c.config_type),
                "documentation": _documentation(c.name) if docs_wanted else None,
            })
        results.append({"error_code": 0, "error_message": None,
                        "resource_type": res.resource_type,
                        "resource_name": res.resource_name, "configs": configs})
    return Respond({"throttle_time_ms": 0, "results": results})
    yield  # unreachable: makes this a generator like the others


def _alter(ctx: HandlerContext, req: Any, incremental: bool) -> ApiGen:
    answers: dict[int, tuple[int, str | None]] = {}
    topic_rows: list[tuple[int, AlterTopicConfigsRow]] = []
    for i, res in enumerate(req.resources):
        illegal = (_illegal_topic_name(res.resource_name)
                   if res.resource_type == TOPIC_RESOURCE else None)
        if res.resource_type == TOPIC_RESOURCE and res.resource_name == "":
            # a broker's '' names its defaults; topics have no such resource to alter
            # (Kafka's answer and text; DescribeConfigs of '' stays INVALID_TOPIC_EXCEPTION)
            answers[i] = (int(ErrorCode.INVALID_REQUEST),
                          "Default topic resources are not allowed.")
        elif illegal is not None:
            answers[i] = (int(ErrorCode.INVALID_TOPIC_EXCEPTION), illegal)
        elif res.resource_type == TOPIC_RESOURCE:
            ops = [ConfigOpRow(c.name, int(c.config_operation) if incremental
                               else int(AlterConfigOp.SET), c.value)
                   for c in res.configs]
            topic_rows.append((i, AlterTopicConfigsRow(res.resource_name, ops)))
        elif res.resource_type == BROKER_RESOURCE:
            answers[i] = (int(ErrorCode.INVALID_REQUEST),
                          "actorlog's broker configs are static: set them in the config file "
                          "or on the command line and restart the broker")
        else:
            answers[i] = (int(ErrorCode.INVALID_REQUEST),
                          f"resource type {res.resource_type} cannot be altered (topics: 2)")
    if topic_rows:
        done: AlterTopicConfigsDone
        [done] = yield [Call(ctx.topology.controller, lambda rid: AlterTopicConfigs(
            rid, bool(req.validate_only), incremental, [row for _i, row in topic_rows]))]
        for (i, _row), result in zip(topic_rows, done.rows, strict=True):
            answers[i] = (result.error_code, result.error_message)
    return Respond({"throttle_time_ms": 0, "responses": [
        {"error_code": answers[i][0], "error_message": answers[i][1],
         "resource_type": res.resource_type, "resource_name": res.resource_name}
        for i, res in enumerate(req.resources)]})


def handle_alter_configs(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """AlterConfigs: the configs given become the topic's overrides; the rest revert."""
    return (yield from _alter(ctx, req, incremental=False))


def handle_incremental_alter_configs(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT, key by key."""
    return (yield from _alter(ctx, req, incremental=True))
