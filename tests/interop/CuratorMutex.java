// Apache Curator's InterProcessMutex, driven from tests/zookeeper.rs to check that Curator and
// fencecheck's ZkLock exclude each other on one lock path.
//
// Usage: java CuratorMutex CONNECT PATH
// Prints "HELD" once it holds the lock, then releases it when a line arrives on stdin and prints
// "RELEASED".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class CuratorMutex {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(5000)
                .connectionTimeoutMs(5000)
                .retryPolicy(new RetryNTimes(3, 100))
                .build();
        client.start();
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        mutex.acquire();
        System.out.println("HELD");
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        mutex.release();
        System.out.println("RELEASED");
        System.out.flush();
        client.close();
    }
}
