// The paper's §5 workload against the peers, with each peer's own Java client (from Debian's packages):
// RabbitMQ's amqp-client (AMQP 0-9-1) and ActiveMQ's OpenWire JMS client. Compiled and run by
// bench/paper_benchmark.py; prints one JSON line.
//
//   java PeerBench rabbitmq|activemq produce PORT QUEUE COUNT SIZE
//   java PeerBench rabbitmq|activemq consume PORT QUEUE COUNT SIZE
//   java PeerBench rabbitmq|activemq latency PORT QUEUE RATE SECONDS SIZE
//
// produce: persistent messages, sent asynchronously without per-message acknowledgement (the paper's setting);
// the last message is sent synchronously (a publisher confirm for RabbitMQ, a synchronous send for ActiveMQ), so
// the clock stops when the broker holds every message. consume: one consumer, automatic acknowledgement,
// prefetch 1,000 messages. latency: a paced producer and a consumer in this process; the payload carries
// System.nanoTime() of the send.
import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.jms.BytesMessage;
import javax.jms.DeliveryMode;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Session;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;

public class PeerBench {
    interface Sink { void send(byte[] body, boolean last) throws Exception; void close() throws Exception; }
    interface Handler { void onMessage(byte[] body); }
    interface Source { void start(Handler handler) throws Exception; void close() throws Exception; }

    static final List<double[]> samples = new ArrayList<>();

    // ---------------------------------------------------------------- RabbitMQ (AMQP 0-9-1)
    static Connection rabbit(int port) throws Exception {
        ConnectionFactory f = new ConnectionFactory();
        f.setHost("127.0.0.1");
        f.setPort(port);
        return f.newConnection();
    }

    static Sink rabbitSink(int port, String queue) throws Exception {
        Connection conn = rabbit(port);
        Channel ch = conn.createChannel();
        ch.queueDeclare(queue, true, false, false, null);
        AMQP.BasicProperties persistent = new AMQP.BasicProperties.Builder().deliveryMode(2).build();
        return new Sink() {
            public void send(byte[] body, boolean last) throws Exception {
                if (last) ch.confirmSelect();
                ch.basicPublish("", queue, persistent, body);
                if (last) ch.waitForConfirmsOrDie(600_000);
            }
            public void close() throws Exception { conn.close(); }
        };
    }

    static Source rabbitSource(int port, String queue) throws Exception {
        Connection conn = rabbit(port);
        Channel ch = conn.createChannel();
        ch.queueDeclare(queue, true, false, false, null);
        ch.basicQos(1000);  // applies to manual acks only; with autoAck the broker pushes under TCP flow control
        return new Source() {
            public void start(Handler h) throws Exception {
                ch.basicConsume(queue, true, new DefaultConsumer(ch) {
                    @Override
                    public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) {
                        h.onMessage(body);
                    }
                });
            }
            public void close() throws Exception { conn.close(); }
        };
    }

    // ---------------------------------------------------------------- ActiveMQ (OpenWire, JMS)
    static ActiveMQConnection activemq(int port) throws Exception {
        ActiveMQConnectionFactory f = new ActiveMQConnectionFactory("tcp://127.0.0.1:" + port
                + "?jms.prefetchPolicy.queuePrefetch=1000");
        f.setUseAsyncSend(true);
        ActiveMQConnection conn = (ActiveMQConnection) f.createConnection();
        conn.start();
        return conn;
    }

    static Sink activemqSink(int port, String queue) throws Exception {
        ActiveMQConnection conn = activemq(port);
        Session s = conn.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer p = s.createProducer(s.createQueue(queue));
        p.setDeliveryMode(DeliveryMode.PERSISTENT);
        return new Sink() {
            public void send(byte[] body, boolean last) throws Exception {
                if (last) conn.setUseAsyncSend(false);
                BytesMessage m = s.createBytesMessage();
                m.writeBytes(body);
                p.send(m);
            }
            public void close() throws Exception { conn.close(); }
        };
    }

    static Source activemqSource(int port, String queue) throws Exception {
        ActiveMQConnection conn = activemq(port);
        Session s = conn.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer c = s.createConsumer(s.createQueue(queue));
        return new Source() {
            public void start(Handler h) throws Exception {
                c.setMessageListener(msg -> {
                    try {
                        BytesMessage m = (BytesMessage) msg;
                        byte[] body = new byte[(int) m.getBodyLength()];
                        m.readBytes(body);
                        h.onMessage(body);
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
            }
            public void close() throws Exception { conn.close(); }
        };
    }

    // ---------------------------------------------------------------- workloads
    static Sink sink(String system, int port, String queue) throws Exception {
        return system.equals("rabbitmq") ? rabbitSink(port, queue) : activemqSink(port, queue);
    }

    static Source source(String system, int port, String queue) throws Exception {
        return system.equals("rabbitmq") ? rabbitSource(port, queue) : activemqSource(port, queue);
    }

    static byte[][] payloads(int size) {
        Random r = new Random(1);
        byte[][] out = new byte[1024][size];
        for (byte[] b : out) r.nextBytes(b);
        return out;
    }

    static void sample(long count, long done, int size, long[] mark) {
        long step = Math.max(count / 100, 1);
        if (done % step != 0) return;
        long now = System.nanoTime();
        samples.add(new double[] {done * (double) size / 1e6, step / ((now - mark[0]) / 1e9)});
        mark[0] = now;
    }

    static String samplesJson() {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < samples.size(); i++) {
            if (i > 0) b.append(',');
            b.append(String.format("[%.2f,%.0f]", samples.get(i)[0], samples.get(i)[1]));
        }
        return b.append(']').toString();
    }

    static void produce(String system, int port, String queue, long count, int size) throws Exception {
        byte[][] bodies = payloads(size);
        Sink out = sink(system, port, queue);
        long[] mark = {System.nanoTime()};
        long start = mark[0];
        for (long i = 1; i <= count; i++) {
            out.send(bodies[(int) (i & 1023)], i == count);
            sample(count, i, size, mark);
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        out.close();
        System.out.printf("{\"messages\": %d, \"seconds\": %.3f, \"samples\": %s}%n", count, seconds, samplesJson());
    }

    static void consume(String system, int port, String queue, long count, int size) throws Exception {
        CountDownLatch done = new CountDownLatch(1);
        long[] state = {0, 0, 0};  // received, bytes, start
        long[] mark = {0};
        Source in = source(system, port, queue);
        in.start(body -> {
            if (state[0] == 0) { state[2] = System.nanoTime(); mark[0] = state[2]; }
            state[0]++;
            state[1] += body.length;
            sample(count, state[0], size, mark);
            if (state[0] == count) done.countDown();
        });
        if (!done.await(900, TimeUnit.SECONDS)) throw new IllegalStateException("consumed only " + state[0]);
        double seconds = (System.nanoTime() - state[2]) / 1e9;
        in.close();
        if (state[1] != count * size) throw new IllegalStateException("wrong byte count " + state[1]);
        System.out.printf("{\"messages\": %d, \"seconds\": %.3f, \"samples\": %s}%n", count, seconds, samplesJson());
    }

    static void latency(String system, int port, String queue, int rate, int seconds, int size) throws Exception {
        int total = rate * seconds;
        long[] micros = new long[total];
        AtomicInteger got = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(1);
        Source in = source(system, port, queue);
        in.start(body -> {
            long sent = ByteBuffer.wrap(body).getLong();
            int i = got.getAndIncrement();
            if (i < total) micros[i] = (System.nanoTime() - sent) / 1000;
            if (i + 1 == total) done.countDown();
        });
        Sink out = sink(system, port, queue);
        byte[] body = new byte[size];
        long start = System.nanoTime();
        long interval = 1_000_000_000L / rate;
        for (int i = 0; i < total; i++) {
            long due = start + i * interval;
            while (System.nanoTime() < due) Thread.onSpinWait();
            ByteBuffer.wrap(body).putLong(System.nanoTime());
            out.send(body, false);
        }
        if (!done.await(120, TimeUnit.SECONDS)) throw new IllegalStateException("received only " + got.get());
        out.close();
        in.close();
        Arrays.sort(micros);
        System.out.printf("{\"messages\": %d, \"rate\": %d, \"p50_us\": %d, \"p99_us\": %d, \"max_us\": %d}%n",
                total, rate, micros[total / 2], micros[(int) (total * 0.99)], micros[total - 1]);
    }

    public static void main(String[] a) throws Exception {
        String system = a[0], mode = a[1], queue = a[3];
        int port = Integer.parseInt(a[2]);
        switch (mode) {
            case "produce": produce(system, port, queue, Long.parseLong(a[4]), Integer.parseInt(a[5])); break;
            case "consume": consume(system, port, queue, Long.parseLong(a[4]), Integer.parseInt(a[5])); break;
            case "latency": latency(system, port, queue, Integer.parseInt(a[4]), Integer.parseInt(a[5]),
                                    Integer.parseInt(a[6])); break;
            default: throw new IllegalArgumentException(mode);
        }
        System.exit(0);
    }
}
