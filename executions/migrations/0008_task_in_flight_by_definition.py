from django.db import migrations, models


class Migration(migrations.Migration):
    """concurrentExecLimit counts the in-flight tasks of a task definition,
    worker and system tasks alike: the index is keyed by the definition's
    name, not the queue (a system task's queue is "@TYPE")."""

    dependencies = [
        ('executions', '0007_task_namespace_unindexed'),
    ]

    operations = [
        migrations.RemoveIndex(model_name='task', name='task_in_flight'),
        migrations.AddIndex(
            model_name='task',
            index=models.Index(condition=models.Q(('status', 'IN_PROGRESS')), fields=['namespace', 'task_def_name'], name='task_in_flight'),
        ),
    ]
