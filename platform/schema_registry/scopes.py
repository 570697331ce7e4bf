"""Config and mode by scope, a part of the registry (:class:`schema_registry.core.Registry` takes it in): the
global scope (None), a subject's, a context's (``:.ctx:``) and ``:.__GLOBAL:``. A subject's setting is its own,
else its context's (the global scope's for the default context), else ``:.__GLOBAL:``'s, else the server's
default (Confluent's fallbacks); updates are CONFIG and MODE records written to the store."""

from __future__ import annotations

from schema_registry.contexts import GLOBAL, context_of, context_scope
from schema_registry.errors import INVALID_LEVEL, INVALID_MODE, NOT_PERMITTED, RegistryError

# of a CONFIG record's value, as Confluent writes them: the level, normalize, and the data contract settings
CONFIG_KEYS = ("compatibilityLevel", "normalize", "compatibilityGroup", "defaultMetadata", "overrideMetadata",
               "defaultRuleSet", "overrideRuleSet")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY")


class Scopes:
    """What the registry knows and writes of configs and modes (``configs``, ``modes``, ``default_level``,
    ``instance_mode``, ``store`` are the registry's)."""

    @staticmethod
    def fallbacks(subject: str | None) -> tuple:
        """Where a subject's config and mode are looked for after its own: its context's scope (the global one for
        the default context), then ``:.__GLOBAL:``."""
        return context_scope(context_of(subject)), f":{GLOBAL}:"

    def level(self, subject: str | None) -> str:
        """The subject's level; a subject with a config of its own but no level there has the server's default (as
        Confluent fills a subject config in), one without a config its context's or the global level."""
        if subject is not None and subject in self.configs:
            return self.configs[subject].get("compatibilityLevel") or self.default_level
        found = (self.configs.get(scope, {}).get("compatibilityLevel") for scope in self.fallbacks(subject))
        return next((level for level in found if level), self.default_level)

    def config_shown(self, subject: str | None, to_global: bool = False) -> dict:
        """A scope's config as GET /config shows it: what is set, the level filled in (``to_global``: unset
        settings of a subject taken from the global config first, Confluent's mergeConfigs)."""
        config = self.config_in_scope(subject) if to_global else self.configs.get(subject, {})
        shown = {"compatibilityLevel": config.get("compatibilityLevel") or self.default_level}
        shown.update((k, config[k]) for k in CONFIG_KEYS[1:] if k in config)
        return shown

    def config_in_scope(self, subject: str | None) -> dict:
        """Confluent's ``getConfigInScope``: a subject's config over the global one, or the global one."""
        context, every = self.fallbacks(subject)
        return {**self.configs.get(every, {}), **self.configs.get(context, {}), **self.configs.get(subject, {})}

    def normalizing(self, subject: str | None) -> bool:
        """The ``normalize`` config (Confluent's): the subject's if set, else the global one, else false. A request's
        ``normalize=true`` normalizes too; ``normalize=false`` cannot turn a configured true off, as in Confluent."""
        found = (self.configs.get(scope, {}).get("normalize") for scope in (subject, *self.fallbacks(subject)))
        return bool(next((value for value in found if value is not None), False))

    def mode(self, subject: str | None) -> str:
        found = (self.modes.get(scope) for scope in (subject, *self.fallbacks(subject)))
        return next((mode for mode in found if mode), "READWRITE")

    async def set_config(self, subject: str | None, changes: dict | None) -> dict | None:
        """Update a scope's config as Confluent's ConfigValue.update: ``changes`` maps ``compatibilityLevel``,
        ``normalize`` or a contract setting (already in its written form) to a new value, or to None to clear it;
        what it does not name stays. ``changes`` None deletes
        the scope's config (a tombstone). Returns the config written."""
        self._writable(subject)
        await self._ready()
        value = None
        if changes is not None:
            level = changes.get("compatibilityLevel")
            if level is not None and (not isinstance(level, str) or level.upper() not in LEVELS):
                raise RegistryError(INVALID_LEVEL, f"Invalid compatibility level. Valid values are {list(LEVELS)}")
            value = dict(self.configs.get(subject, {}))
            for key, new in changes.items():
                if new is None:
                    value.pop(key, None)
                elif key == "compatibilityLevel":
                    value[key] = new.upper()
                else:
                    value[key] = bool(new) if key == "normalize" else new
        await self.store.write({"keytype": "CONFIG", "subject": subject, "magic": 0}, value)
        return value

    async def set_mode(self, subject: str | None, mode: str | None) -> None:
        """``None`` deletes the subject's mode (a tombstone)."""
        if self.instance_mode == "READONLY":
            raise RegistryError(NOT_PERMITTED, "This registry instance is read-only (mode=READONLY)")
        await self._ready()
        if mode is None and subject is not None:
            await self.store.write({"keytype": "MODE", "subject": subject, "magic": 0}, None)
            return
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(INVALID_MODE, f"Invalid mode. Valid values are {list(MODES)}")
        await self.store.write({"keytype": "MODE", "subject": subject, "magic": 0}, {"mode": mode.upper()})
