"""Namespaces and API keys: who may do what, where."""

from __future__ import annotations

import hashlib
import secrets

from django.core.validators import RegexValidator
from django.db import models

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
name_validator = RegexValidator(NAME_PATTERN, "use 1–128 characters from A–Z a–z 0–9 _ . -")
KEY_PREFIX = "nf_"


class Namespace(models.Model):
    """A tenant: definitions, executions, queues and limits live in one."""

    name = models.CharField(max_length=128, unique=True, validators=[name_validator])
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    ADMIN = "admin"
    DEVELOPER = "developer"
    WORKER = "worker"


def hash_key(raw: str) -> str:
    # Keys are 256 random bits, so a fast hash is enough: there is nothing to
    # brute-force that a slow hash would protect.
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiKey(models.Model):
    """An API key, stored as a hash. ``namespace`` null means every namespace."""

    namespace = models.ForeignKey(Namespace, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys")
    role = models.CharField(max_length=16, choices=Role.choices)
    name = models.CharField(max_length=200, blank=True, default="")
    prefix = models.CharField(max_length=16, help_text="First characters of the key, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        scope = self.namespace.name if self.namespace_id else "*"
        return f"{self.prefix}… ({self.role} @ {scope})"

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        """A new raw key with its display prefix and hash."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        return raw, raw[:10], hash_key(raw)

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class Secret(models.Model):
    """A secret of one namespace (a WEBHOOK's signing key), referenced by
    name from its tasks. Set through the API (admin key) and never shown
    back: neither the API nor the admin ever renders ``value``."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=128, validators=[name_validator])
    value = models.TextField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="secret_unique_name")]

    def __str__(self) -> str:
        return f"{self.namespace_id}/{self.name}"
