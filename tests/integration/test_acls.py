"""ACL enforcement (issue 18 item 2) on a 3-broker cluster with Kafka's AclAuthorizer settings: ACLs in ZooKeeper,
``super.users`` (the brokers and admin), SCRAM users alice and bob on a SASL_PLAINTEXT listener, the brokers
replicating over their own SASL listener as super users, and a PLAINTEXT listener whose anonymous principal has
no ACL. Outside clients judge: confluent-kafka's admin ACL calls, refused produce / consume / commit / create /
transactions with Kafka's codes as confluent-kafka and kafka-python see them, Metadata hiding, a forged follower
Fetch refused without moving the high watermark, and ``logbus acls`` both through ZooKeeper and through a broker."""

import datetime
import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from rawclient import RawClient, request_module
from support import REPO, BrokerProcess, ZooKeeperProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

USERS = {"broker": "broker-pw", "admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}


def logbus(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=60, input=stdin)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("acls")
    zk = ZooKeeperProcess(base / "zk").start()
    connect = zk.connect + "/acls"
    brokers = []
    try:
        for user, password in USERS.items():  # the first users, in ZooKeeper before any broker runs
            made = logbus("configs", "--zookeeper", connect, "--alter", "--entity-type", "users", "--entity-name",
                          user, "--add-config", f"SCRAM-SHA-512=[password={password}]")
            assert made.returncode == 0, made.stderr
        for i in range(3):
            b = BrokerProcess(base / f"b{i}", broker_id=i)
            b.client, b.internal = free_port(), free_port()
            b.settings.update({
                "listeners": f"PLAINTEXT://127.0.0.1:{b.port},CLIENT://127.0.0.1:{b.client},"
                             f"INTERNAL://127.0.0.1:{b.internal}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,"
                                                  "INTERNAL:SASL_PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config":
                    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                    'password="broker-pw";',
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:broker;User:admin",
                "zookeeper.connect": connect, "zookeeper.session.timeout.ms": 6000,
                "replica.fetch.wait.max.ms": 100, "replica.lag.time.max.ms": 5000,
                "group.initial.rebalance.delay.ms": 0, "default.replication.factor": 3,
                "transaction.state.log.num.partitions": 4,
            })
            brokers.append(b.start())
        cluster = Cluster(zk, connect, brokers)
        admin = AdminClient(cluster.conf("admin"))
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, what="three brokers")
        yield cluster
    finally:
        for b in brokers:
            b.stop()
        zk.stop()


class Cluster:
    def __init__(self, zk, connect, brokers):
        self.zk, self.connect, self.brokers = zk, connect, brokers

    def conf(self, user: str, broker=None, **extra) -> dict:
        where = [broker] if broker is not None else self.brokers
        return {"bootstrap.servers": ",".join(f"127.0.0.1:{b.client}" for b in where),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": USERS[user], **extra}

    def kafka_python(self, user: str) -> dict:
        return dict(bootstrap_servers=[f"127.0.0.1:{b.client}" for b in self.brokers],
                    security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
                    sasl_plain_password=USERS[user])

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(self.conf(user))

    def topic(self, prefix: str = "acl") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = self.admin()  # kept alive until the answer
        admin.create_topics([NewTopic(name, 2, 3)])[name].result(30)
        return name

    def allow(self, principal: str, operation: AclOperation, rtype: ResourceType, name: str,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> None:
        binding = AclBinding(rtype, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)
        admin = self.admin()
        admin.create_acls([binding])[binding].result(20)
        self.wait_everywhere(binding)

    def wait_everywhere(self, binding: AclBinding, present: bool = True) -> None:
        """Until every broker's ACL cache (DescribeAcls answers from it) has the binding: brokers learn of ACLs
        through ZooKeeper's change notifications, a moment after the one that stored it."""
        exact = AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type, binding.principal,
                                 binding.host, binding.operation, binding.permission_type)
        for b in self.brokers:
            admin = AdminClient(self.conf("admin", broker=b))
            wait_until(lambda: (admin.describe_acls(exact).result(20) == [binding]) == present, 20, interval=0.2,
                       what=f"broker {b.settings['broker.id']} {'knowing' if present else 'forgetting'} {binding}")


def produce(conf: dict, topic: str, n: int = 5) -> list:
    outcomes = []
    producer = Producer({"message.timeout.ms": 15000, "retries": 0, **conf})
    for i in range(n):
        producer.produce(topic, str(i).encode(), on_delivery=lambda err, _m: outcomes.append(err))
    producer.flush(30)
    return outcomes


def delivered(outcomes: list) -> bool:
    """Every delivery succeeded. Compare by identity: ``KafkaError == None`` leaves a TypeError set without
    raising it (confluent-kafka's richcompare), so the next builtin call fails with SystemError."""
    return bool(outcomes) and all(e is None for e in outcomes)


def consume(conf: dict, topic: str, group: str, want: int, timeout: float = 30) -> tuple[list, list]:
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values, errors = [], []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < want and not errors and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                errors.append(m.error().code())
            else:
                values.append(m.value())
        if values:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values, errors


def test_admin_acl_calls_create_describe_delete_and_need_cluster_alter(cluster):
    admin = cluster.admin()
    topic = f"acl-admin-{uuid.uuid4().hex[:6]}"
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.GROUP, "acl-g-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)]
    for future in admin.create_acls(bindings).values():
        assert future.result(20) is None
    described = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                                     None, AclOperation.ANY, AclPermissionType.ANY)).result(20)
    assert set(bindings) <= set(described)
    matched = admin.describe_acls(AclBindingFilter(ResourceType.GROUP, "acl-g-1", ResourcePatternType.MATCH, None,
                                                   None, AclOperation.ANY, AclPermissionType.ANY)).result(20)
    assert matched == [bindings[1]]
    # a non-super user without Alter on the cluster: CLUSTER_AUTHORIZATION_FAILED
    refused = AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.ALL, AclPermissionType.ALLOW)
    bob = cluster.admin("bob")
    with pytest.raises(KafkaException) as info:
        bob.create_acls([refused])[refused].result(20)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (confluent-kafka's describe_acls drops DescribeAcls' top-level error and answers []: kafka-python raises it)
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient,
                             ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError
    kp_bob = KafkaAdminClient(**cluster.kafka_python("bob"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp_bob.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                           permission_type=ACLPermissionType.ANY,
                                           resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                                  ACLResourcePatternType.ANY)))
    finally:
        kp_bob.close()
    # delete answers what each filter removed
    doomed = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    assert admin.delete_acls([doomed])[doomed].result(20) == [bindings[0]]
    left = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(20)
    assert left == []


def test_produce_consume_and_commit_get_kafkas_authorization_errors(cluster):
    topic = cluster.topic()
    group = f"acl-grp-{uuid.uuid4().hex[:6]}"
    assert delivered(produce(cluster.conf("admin"), topic))
    # bob has no ACL: produce refused with TOPIC_AUTHORIZATION_FAILED, nothing written
    outcomes = produce(cluster.conf("bob"), topic, 3)
    assert outcomes and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in outcomes)
    # alice may read the topic but not use the group
    cluster.allow("User:alice", AclOperation.READ, ResourceType.TOPIC, topic)
    values, errors = consume(cluster.conf("alice"), topic, group, 5)
    assert errors and errors[0] == KafkaError.GROUP_AUTHORIZATION_FAILED, errors
    cluster.allow("User:alice", AclOperation.READ, ResourceType.GROUP, group)
    values, errors = consume(cluster.conf("alice"), topic, group, 5)
    assert not errors and sorted(values) == [str(i).encode() for i in range(5)]
    checker = Consumer({**cluster.conf("admin"), "group.id": group})
    committed = checker.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
    assert sum(tp.offset for tp in committed if tp.offset >= 0) == 5  # alice's commit went through
    # Read does not grant Write: alice's produce is still refused
    assert all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
               for e in produce(cluster.conf("alice"), topic, 1))
    # the log holds only admin's 5 records: nothing of the refused writes
    lows_highs = [checker.get_watermark_offsets(TopicPartition(topic, p), timeout=20) for p in (0, 1)]
    checker.close()
    assert sum(high for _, high in lows_highs) == 5


def test_kafka_python_sees_the_same_codes(cluster):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    topic = cluster.topic()
    conf = cluster.kafka_python("bob")
    producer = KafkaProducer(**conf, retries=0, max_block_ms=15000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"x").get(timeout=20)
    finally:
        producer.close(5)
    cluster.allow("User:bob", AclOperation.READ, ResourceType.TOPIC, topic)
    consumer = KafkaConsumer(topic, **conf, group_id="bob-not-allowed", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in consumer:
                break
    finally:
        consumer.close()


def test_the_admin_apis_need_their_acls(cluster):
    """DeleteRecords needs Delete on the topic, OffsetDelete Delete on the group, DescribeLogDirs Describe and
    ElectLeaders and AlterReplicaLogDirs Alter on the cluster, DescribeClientQuotas DescribeConfigs and AlterClientQuotas AlterConfigs on
    the cluster: refused to a user without them with Kafka's codes."""
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
    from confluent_kafka import ElectionType
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition
    from kafka import TopicPartitionReplica
    from kafka.errors import ClusterAuthorizationFailedError, GroupAuthorizationFailedError

    topic = cluster.topic()
    produce(cluster.conf("admin"), topic, 5)
    cluster.allow("User:bob", AclOperation.DESCRIBE, ResourceType.TOPIC, topic)  # he sees it, may not delete
    bob = AdminClient(cluster.conf("bob"))
    with pytest.raises(KafkaException) as refused:
        bob.delete_records([TopicPartition(topic, 0, 1)])[TopicPartition(topic, 0, 1)].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        bob.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    kbob = KafkaAdminClient(**cluster.kafka_python("bob"), request_timeout_ms=30000)
    try:
        assert all(answer["log_dirs"] == [] for answer in kbob.describe_log_dirs())  # CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(GroupAuthorizationFailedError):
            kbob.delete_group_offsets("bob-group", [KTopicPartition(topic, 0)])

        async def send(request):
            return await kbob._manager.send(request)

        described = kbob._manager.run(send, DescribeClientQuotasRequest(components=[], strict=False))
        assert described.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        entry = AlterClientQuotasRequest.EntryData
        altered = kbob._manager.run(send, AlterClientQuotasRequest(entries=[entry(
            entity=[entry.EntityData(entity_type="user", entity_name="bob")],
            ops=[entry.OpData(key="producer_byte_rate", value=1e9, remove=False)])], validate_only=False))
        assert altered.entries[0].error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        moved = kbob.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 0): "/anywhere"})
        assert moved == {TopicPartitionReplica(topic, 0, 0): ClusterAuthorizationFailedError}
    finally:
        kbob.close()
    cluster.allow("User:bob", AclOperation.DELETE, ResourceType.TOPIC, topic)
    # offset 0: valid whether partition 0 holds some of the 5 records or none (offset 1 past an empty partition's
    # high watermark is OFFSET_OUT_OF_RANGE, which a clean-clone run met)
    assert bob.delete_records([TopicPartition(topic, 0, 0)])[TopicPartition(topic, 0, 0)].result(30).low_watermark \
        in (0, 1)


def test_metadata_hides_topics_and_create_needs_create(cluster):
    mine, other = cluster.topic("alice"), cluster.topic("secret")
    alice = cluster.admin("alice")
    assert alice.list_topics(timeout=10).topics.keys().isdisjoint({mine, other})
    cluster.allow("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED)
    listed = set(alice.list_topics(timeout=10).topics)
    assert mine in listed and other not in listed
    named = alice.list_topics(other, timeout=10).topics[other]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as info:
        alice.create_topics([NewTopic("alice-made", 1, 3)])["alice-made"].result(20)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    cluster.allow("User:alice", AclOperation.CREATE, ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED)
    assert alice.create_topics([NewTopic("alice-made", 1, 3)])["alice-made"].result(20) is None
    with pytest.raises(KafkaException) as info:
        alice.delete_topics([other])[other].result(20)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_authorized_operations_are_what_the_acls_allow(cluster):
    """describe_cluster / describe_topics / describe_consumer_groups with include_authorized_operations: alice's
    Read on a topic and a group implies Describe (Kafka's implied operations) and gives nothing else; she may not
    Describe the cluster, so its field is empty; a super user gets every cluster operation."""
    from confluent_kafka import TopicCollection

    topic, group = cluster.topic("ops"), f"ops-{uuid.uuid4().hex[:8]}"
    cluster.allow("User:alice", AclOperation.READ, ResourceType.TOPIC, topic)
    cluster.allow("User:alice", AclOperation.READ, ResourceType.GROUP, group)
    alice = cluster.admin("alice")
    described = alice.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(20)
    assert set(described.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    got = alice.describe_consumer_groups([group], include_authorized_operations=True)[group].result(20)
    assert set(got.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    assert not alice.describe_cluster(include_authorized_operations=True).result(20).authorized_operations
    admin, bob = cluster.admin(), cluster.admin("bob")  # kept alive until their answers
    everything = admin.describe_cluster(include_authorized_operations=True).result(20)
    assert len(set(everything.authorized_operations)) == 7
    with pytest.raises(KafkaException) as refused:  # bob may not Describe the group: Kafka's code, no field
        bob.describe_consumer_groups([group], include_authorized_operations=True)[group].result(20)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    from kafka.admin import KafkaAdminClient  # DescribeCluster (key 60), as kafka-python's admin asks

    for user, expected in (("alice", 0), ("admin", 7)):
        kp = KafkaAdminClient(**cluster.kafka_python(user))
        try:
            assert len(kp.describe_cluster()["authorized_operations"]) == expected
        finally:
            kp.close()


def test_transactional_producer_needs_write_on_its_transactional_id(cluster):
    topic = cluster.topic()
    cluster.allow("User:bob", AclOperation.WRITE, ResourceType.TOPIC, topic)
    txn = Producer({**cluster.conf("bob"), "transactional.id": "bob-txn"})
    with pytest.raises(KafkaException) as info:
        txn.init_transactions(20)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    cluster.allow("User:bob", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "bob-txn")
    cluster.allow("User:bob", AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "bob-txn")
    txn = Producer({**cluster.conf("bob"), "transactional.id": "bob-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"committed")
    txn.commit_transaction(30)
    # an idempotent producer: Write on some topic is enough (KIP-679), as bob has
    outcomes = produce(cluster.conf("bob", **{"enable.idempotence": True, "retries": 5}), topic, 2)
    assert len(outcomes) == 2 and delivered(outcomes)
    # KIP-664's tooling: ListTransactions lists only ids the principal may Describe, DescribeTransactions needs
    # Describe on the id, DescribeProducers Read on the topic
    from kafka.admin import KafkaAdminClient

    for user, visible in (("bob", True), ("alice", False)):
        kp = KafkaAdminClient(**cluster.kafka_python(user))
        try:
            listed = {t.transactional_id for rows in kp.list_transactions().values() for t in rows}
            assert ("bob-txn" in listed) == visible
        finally:
            kp.close()
    anonymous = RawClient("127.0.0.1", cluster.brokers[0].port)  # PLAINTEXT: User:ANONYMOUS, no ACL
    try:
        dt = request_module(65, 0)
        (state,) = anonymous.request(65, 0, dt.DescribeTransactionsRequest(transactional_ids=("bob-txn",))
                                     ).transaction_states
        assert state.error_code.value == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        dp = request_module(61, 0)
        answer = anonymous.request(61, 0, dp.DescribeProducersRequest(topics=(
            dp.TopicRequest(name=topic, partition_indexes=(0,)),)))
        assert answer.topics[0].partitions[0].error_code.value == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        anonymous.close()


def test_forged_follower_fetch_is_refused_and_does_not_move_the_high_watermark(cluster):
    """Anonymous on the PLAINTEXT listener posing as replica 1: no ClusterAction, so TOPIC_AUTHORIZATION_FAILED
    per partition, and the leader does not take the claimed offset as that follower's progress."""
    topic = cluster.topic()
    admin = cluster.admin()
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    producer = Producer(cluster.conf("admin", **{"acks": 1}))
    for i in range(3):
        producer.produce(topic, b"v", partition=0)
    assert producer.flush(20) == 0
    broker = next(b for b in cluster.brokers if b.settings["broker.id"] == leader)
    follower = next(r for r in (0, 1, 2) if r != leader)
    mod = request_module(1, 12)
    fetch = mod.FetchRequest(
        cluster_id=None, replica_id=follower, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1,
        max_bytes=1 << 20, topics=(mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
            partition=0, fetch_offset=1_000_000, partition_max_bytes=1 << 20),)),), forgotten_topics_data=())
    client = RawClient("127.0.0.1", broker.port)
    try:
        response = client.request(1, 12, fetch)
    finally:
        client.close()
    errors = [p.error_code for t in response.responses for p in t.partitions]
    assert [int(e) for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    checker = Consumer({**cluster.conf("admin"), "group.id": "hw"})
    try:  # acks=1: the high watermark reaches 3 once the real followers have fetched (a moment on a busy machine)
        highs = []
        wait_until(lambda: highs.append(checker.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)[1])
                   or highs[-1] >= 3, 20, interval=0.2, what="the followers replicating")
    finally:
        checker.close()
    assert highs[-1] == 3 and max(highs) == 3  # not 1,000,000: the forged offset counted for nothing


def test_logbus_acls_through_zookeeper_reach_every_broker_and_through_a_broker(cluster):
    topic = cluster.topic()
    added = logbus("acls", "--authorizer-properties", f"zookeeper.connect={cluster.connect}", "--add",
                   "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    assert added.returncode == 0, added.stderr
    for b in cluster.brokers:  # the change notification reaches each broker's cache
        wait_until(lambda: delivered(produce(cluster.conf("bob", broker=b), topic, 1)), 20, interval=0.5,
                   what=f"broker {b.settings['broker.id']} applying the new ACL")
    command = cluster.brokers[0].workdir / "bob-admin.properties"
    command.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config="
                       "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" "
                       "password=\"admin-pw\";\n")
    boot = f"127.0.0.1:{cluster.brokers[1].client}"
    listed = logbus("acls", "--bootstrap-server", boot, "--command-config", str(command), "--list", "--topic", topic)
    assert listed.returncode == 0 and "User:bob" in listed.stdout and "WRITE" in listed.stdout.upper(), \
        listed.stdout + listed.stderr
    removed = logbus("acls", "--bootstrap-server", boot, "--command-config", str(command), "--remove", "--force",
                     "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    assert removed.returncode == 0, removed.stderr
    for b in cluster.brokers:
        wait_until(lambda: produce(cluster.conf("bob", broker=b), topic, 1)[0] is not None, 20, interval=0.5,
                   what=f"broker {b.settings['broker.id']} dropping the removed ACL")


def test_standalone_broker_keeps_acls_in_its_log_dir_and_allows_everyone_where_none_apply(tmp_path):
    """No ZooKeeper: ACLs in ``acls.json`` of the first log dir, kept across a restart; with
    ``allow.everyone.if.no.acl.found=true`` a resource without ACLs stays open and one with ACLs is closed to others."""
    b = BrokerProcess(tmp_path / "standalone", num_partitions=1)
    b.settings.update({"authorizer.class.name": "logbus.AclAuthorizer", "allow.everyone.if.no.acl.found": "true"})
    b.start()
    try:
        anonymous = {"bootstrap.servers": b.bootstrap}
        admin = AdminClient(anonymous)
        for name in ("open", "closed"):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(20)
        binding = AclBinding(ResourceType.TOPIC, "closed", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)
        admin.create_acls([binding])[binding].result(20)  # no ACL on the cluster yet: everyone may Alter it
        assert (b.log_dir / "acls.json").exists()

        def outcomes():
            return {t: produce(anonymous, t, 1)[0] for t in ("open", "closed")}

        first = outcomes()
        assert first["open"] is None and first["closed"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        b.stop()
        b.start()
        again = outcomes()
        assert again["open"] is None and again["closed"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        b.stop()
