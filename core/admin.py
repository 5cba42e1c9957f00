"""Admin pieces every app's admin shares: soft delete, read-only registrations, views that call locking services."""

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import FORMFIELD_FOR_DBFIELD_DEFAULTS, csrf_protect_m
from django.contrib.admin.utils import model_ngettext
from django.core.paginator import Paginator
from django.db import models, transaction
from django.db.models import ProtectedError
from django.utils.functional import cached_property
from django.utils.text import capfirst

from core.numbers import AmountField, WholeNumberField

# Every admin's form reads a model's numbers as the shop's pages and API do (core.numbers): Django's own
# fields take "٣", " 3 " and, for a whole number, "3.0".
for _model_field, _form_field in ((models.IntegerField, WholeNumberField), (models.DecimalField, AmountField)):
    for _kind in {_model_field, *(kind for kind in FORMFIELD_FOR_DBFIELD_DEFAULTS if issubclass(kind, _model_field))}:
        FORMFIELD_FOR_DBFIELD_DEFAULTS[_kind] = {
            **FORMFIELD_FOR_DBFIELD_DEFAULTS.get(_kind, {}),
            "form_class": _form_field,
        }


class NonAtomicChangeformMixin:
    """Add/change views without the admin's request-wide transaction.

    The stock services open a *durable* transaction inside the SKU lock so that the commit happens
    while the lock is held; Django wraps add/change POSTs in ``transaction.atomic()``, inside which
    they refuse to run (and whose later commit would come after the lock's release). An admin whose
    form or ``save_model`` calls them takes this mixin.
    """

    @csrf_protect_m
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return self._changeform_view(request, object_id, form_url, extra_context)


class BoundedCountPaginator(Paginator):
    """Pages of a table that only grows, counted no further than ``LIST_COUNT_LIMIT`` rows.

    Django's change list counts every row of its list (``COUNT(*)``) to number its pages: at millions of
    orders or ledger rows that scan is what opening the page costs. Counting a ``LIMIT``-ed subquery
    stops at the limit: the list then says that many (read: at least) and pages that far; a filter or
    a search narrows it.
    """

    @cached_property
    def count(self) -> int:
        return self.object_list[: settings.LIST_COUNT_LIMIT].count()


class GrowingTableAdminMixin:
    """For the change list of a table that grows with history: no count of the whole table, ever."""

    paginator = BoundedCountPaginator
    show_full_result_count = False  # else the list counts the unfiltered table a second time


class ReadOnlyAdminMixin:
    """For rows only services write (ledger, reservations, order lines): shown, never added, edited or deleted."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class DeletedFilter(admin.SimpleListFilter):
    """Deleted: No (the default) / Yes / All, over a list that holds every row."""

    title = "deleted"
    parameter_name = "deleted"

    def lookups(self, request, model_admin):
        return [("no", "No"), ("yes", "Yes"), ("all", "All")]

    def value(self):
        return super().value() or "no"

    def choices(self, changelist):
        # SimpleListFilter's own choices() adds an "All" that means "no parameter": here that is "No".
        facet_counts = self.get_facet_queryset(changelist) if changelist.add_facets else {}
        for index, (lookup, title) in enumerate(self.lookup_choices):
            if f"{index}__c" in facet_counts:
                title = f"{title} ({facet_counts[f'{index}__c']})"
            yield {
                "selected": self.value() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request, queryset):
        if self.value() == "no":
            return queryset.filter(is_deleted=False)
        if self.value() == "yes":
            return queryset.filter(is_deleted=True)
        return queryset


class SoftDeleteAdmin(admin.ModelAdmin):
    """Admin for ``BaseModel`` rows: the list holds ``all_objects`` behind a "Deleted" filter, delete is soft,
    "Restore selected" undoes it, and only superusers may erase rows, and only rows already deleted.
    """

    actions = ["restore_selected", "hard_delete_selected"]

    def get_queryset(self, request):
        queryset = self.model.all_objects.get_queryset()
        ordering = self.get_ordering(request)
        return queryset.order_by(*ordering) if ordering else queryset

    def get_list_filter(self, request):
        return [*super().get_list_filter(request), DeletedFilter]

    def get_deleted_objects(self, objs, request):
        """A soft delete touches only these rows: nothing cascades, so no related row protects them."""
        objs = list(objs)
        opts = self.model._meta
        return (
            [f"{capfirst(opts.verbose_name)}: {obj}" for obj in objs],
            {opts.verbose_name_plural: len(objs)},
            set(),
            [],
        )

    def delete_model(self, request, obj):
        """Soft, through the same (conditional) path as the bulk action."""
        self.delete_queryset(request, self.model.all_objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        """Soft (``SoftDeleteQuerySet.delete()`` is an UPDATE); rows already deleted keep their first deletion time."""
        queryset.filter(is_deleted=False).delete()
        self.message_user(
            request, 'Deleted rows are hidden, not erased: filter "Deleted: Yes" and use "Restore selected".'
        )

    @admin.action(description="Restore selected %(verbose_name_plural)s", permissions=["delete"])
    def restore_selected(self, request, queryset):
        restored = list(queryset.filter(is_deleted=True))
        self.model.all_objects.filter(pk__in=[obj.pk for obj in restored]).restore()
        for obj in restored:
            self.log_change(request, obj, "Restored.")
        self.message_user(request, f"Restored {len(restored)} {model_ngettext(self.opts, len(restored))}.")

    @admin.action(
        description="Erase selected deleted %(verbose_name_plural)s permanently (superusers)",
        permissions=["hard_delete"],
    )
    def hard_delete_selected(self, request, queryset):
        """Only rows already soft-deleted, so erasing always takes two deliberate steps."""
        erased, kept = 0, []
        for obj in queryset.filter(is_deleted=True):
            try:
                with transaction.atomic():
                    self.log_deletions(request, [obj])
                    self.hard_delete_object(obj)
            except ProtectedError as exc:
                referrers = sorted({str(row._meta.verbose_name_plural) for row in exc.protected_objects})
                kept.append(f"{obj} (still referred to by {', '.join(referrers)})")
            else:
                erased += 1
        if erased:
            self.message_user(request, f"Erased {erased} {model_ngettext(self.opts, erased)} permanently.")
        if kept:
            self.message_user(request, "Kept, because other records need them: " + "; ".join(kept), messages.ERROR)
        if alive := queryset.filter(is_deleted=False).count():
            self.message_user(
                request,
                f"Skipped {alive} {model_ngettext(self.opts, alive)} not deleted yet: delete first, then erase.",
                messages.WARNING,
            )

    def has_hard_delete_permission(self, request):
        return request.user.is_superuser

    def hard_delete_object(self, obj):
        obj.hard_delete()
