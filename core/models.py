"""Abstract base models every app's models build on: timestamps and soft delete. No table of its own.

``QuerySet.update()`` skips ``auto_now``, so our querysets stamp ``updated_at`` themselves:
the inventory service's conditional UPDATEs keep the timestamp current too.
"""

from django.db import models
from django.utils import timezone


class TimestampedQuerySet(models.QuerySet):
    def update(self, **kwargs):
        kwargs.setdefault("updated_at", timezone.now())
        return super().update(**kwargs)


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TimestampedQuerySet.as_manager()

    class Meta:
        abstract = True


class SoftDeleteQuerySet(TimestampedQuerySet):
    def delete(self):
        """Soft, also for the admin's bulk "delete selected" (it calls QuerySet.delete())."""
        return self.update(is_deleted=True, deleted_at=timezone.now())

    def hard_delete(self):
        return super().delete()

    def restore(self):
        return self.update(is_deleted=False, deleted_at=None)

    def alive(self):
        return self.filter(is_deleted=False)

    def deleted(self):
        return self.filter(is_deleted=True)


class SoftDeleteManager(models.Manager.from_queryset(SoftDeleteQuerySet)):
    """Hides deleted rows."""

    def get_queryset(self):
        return super().get_queryset().filter(is_deleted=False)


AllObjectsManager = models.Manager.from_queryset(SoftDeleteQuerySet)


class BaseModel(TimestampedModel):
    """Timestamps plus soft delete: ``delete()`` hides the row, ``hard_delete()`` removes it."""

    is_deleted = models.BooleanField(default=False, db_index=True, editable=False)
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = SoftDeleteManager()
    all_objects = AllObjectsManager()

    class Meta:
        abstract = True
        default_manager_name = "objects"
        # Related lookups (an order line's product) must still reach soft-deleted rows.
        base_manager_name = "all_objects"

    def delete(self, using=None, keep_parents=False):
        self.is_deleted = True
        self.deleted_at = timezone.now()
        self.save(update_fields=["is_deleted", "deleted_at", "updated_at"])

    def hard_delete(self, using=None, keep_parents=False):
        return super().delete(using=using, keep_parents=keep_parents)

    def restore(self):
        self.is_deleted = False
        self.deleted_at = None
        self.save(update_fields=["is_deleted", "deleted_at", "updated_at"])
