"""The models that moved here from ``orders`` (its migration 0018 renamed their tables): state only."""

import django.db.models.deletion
import django.db.models.manager
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


MOVED = ['shipment', 'shipmentline', 'returnrequest', 'returnline']


def content_types_relabel(apps, source, target):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not content_type.objects.filter(app_label=target, model=model).exists():
            content_type.objects.filter(app_label=source, model=model).update(app_label=target)


def content_types_move(apps, schema_editor):
    """The moved models' content types follow them, so permissions and admin history keep pointing at them."""
    content_types_relabel(apps, "orders", "fulfilment")


def content_types_move_back(apps, schema_editor):
    """Unapplied, the models are orders' again (0018 renames the tables back): so are their content types."""
    content_types_relabel(apps, "fulfilment", "orders")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ('orders', '0018_payments_and_fulfilment_move'),
        ('payments', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
                migrations.CreateModel(
                    name='ReturnRequest',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                        ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('state', models.CharField(choices=[('requested', 'Requested'), ('accepted', 'Accepted: refunded'), ('refused', 'Refused')], db_index=True, default='requested', max_length=20)),
                        ('reason', models.TextField(blank=True, max_length=1000)),
                        ('answer', models.TextField(blank=True, max_length=1000)),
                        ('emailed_state', models.CharField(blank=True, editable=False, max_length=20)),
                        ('decided_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('order', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='returns', to='orders.order')),
                        ('refund', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='return_request', to='payments.refund')),
                    ],
                    options={
                        'ordering': ['id'],
                        'abstract': False,
                        'base_manager_name': 'all_objects',
                        'default_manager_name': 'objects',
                    },
                    managers=[
                        ('objects', django.db.models.manager.Manager()),
                        ('all_objects', django.db.models.manager.Manager()),
                    ],
                ),
                migrations.CreateModel(
                    name='ReturnLine',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                        ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('quantity', models.PositiveIntegerField()),
                        ('order_line', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='return_lines', to='orders.orderline')),
                        ('return_request', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='lines', to='fulfilment.returnrequest')),
                    ],
                    options={
                        'ordering': ['id'],
                        'abstract': False,
                        'base_manager_name': 'all_objects',
                        'default_manager_name': 'objects',
                    },
                    managers=[
                        ('objects', django.db.models.manager.Manager()),
                        ('all_objects', django.db.models.manager.Manager()),
                    ],
                ),
                migrations.CreateModel(
                    name='Shipment',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                        ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('carrier', models.CharField(max_length=100)),
                        ('tracking_number', models.CharField(blank=True, max_length=100)),
                        ('tracking_url', models.URLField(blank=True, max_length=500)),
                        ('emailed_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('order', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='shipments', to='orders.order')),
                        ('shipped_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'ordering': ['id'],
                        'abstract': False,
                        'base_manager_name': 'all_objects',
                        'default_manager_name': 'objects',
                    },
                    managers=[
                        ('objects', django.db.models.manager.Manager()),
                        ('all_objects', django.db.models.manager.Manager()),
                    ],
                ),
                migrations.CreateModel(
                    name='ShipmentLine',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                        ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('quantity', models.PositiveIntegerField()),
                        ('order_line', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='shipment_lines', to='orders.orderline')),
                        ('shipment', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='lines', to='fulfilment.shipment')),
                    ],
                    options={
                        'ordering': ['id'],
                        'abstract': False,
                        'base_manager_name': 'all_objects',
                        'default_manager_name': 'objects',
                    },
                    managers=[
                        ('objects', django.db.models.manager.Manager()),
                        ('all_objects', django.db.models.manager.Manager()),
                    ],
                ),
                migrations.AddConstraint(
                    model_name='returnrequest',
                    constraint=models.CheckConstraint(condition=models.Q(models.Q(('state', 'accepted'), _negated=True), ('refund__isnull', False), _connector='OR'), name='return_accepted_has_refund'),
                ),
                migrations.AddConstraint(
                    model_name='returnline',
                    constraint=models.CheckConstraint(condition=models.Q(('quantity__gt', 0)), name='return_line_quantity_positive'),
                ),
                migrations.AddConstraint(
                    model_name='returnline',
                    constraint=models.UniqueConstraint(fields=('return_request', 'order_line'), name='return_line_one_per_order_line'),
                ),
                migrations.AddConstraint(
                    model_name='shipmentline',
                    constraint=models.CheckConstraint(condition=models.Q(('quantity__gt', 0)), name='shipment_line_quantity_positive'),
                ),
                migrations.AddConstraint(
                    model_name='shipmentline',
                    constraint=models.UniqueConstraint(fields=('shipment', 'order_line'), name='shipment_line_one_per_order_line'),
                ),
    
        ]),
        migrations.RunPython(content_types_move, content_types_move_back),
    ]
