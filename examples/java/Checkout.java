// java Checkout 101 202: reserve one of each product in one transaction, in cart order
// (the bug: two carts with the same products in opposite orders can deadlock, 40P01).
// java Checkout --sorted 202 101: the fix, every cart reserves in product_id order.
//
// The connection comes from JDBC_DATABASE_URL (pgjdbc reads neither PG* nor DATABASE_URL;
// the password, if any, from PGPASSFILE).
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

public class Checkout {
    static void reserve(Connection conn, List<Integer> productIds) throws SQLException {
        conn.setAutoCommit(false);
        try (PreparedStatement update = conn.prepareStatement(
                "UPDATE inventory SET reserved = reserved + ? "
                        + "WHERE product_id = ? AND available - reserved >= ?")) {
            for (int id : productIds) {
                update.setInt(1, 1);
                update.setInt(2, id);
                update.setInt(3, 1);
                if (update.executeUpdate() == 0) {
                    throw new SQLException("OUT_OF_STOCK:" + id, "P0001");
                }
            }
            conn.commit();
        } catch (SQLException e) {
            conn.rollback();
            throw e;
        }
    }

    public static void main(String[] args) {
        List<Integer> ids = new ArrayList<>();
        boolean sorted = false;
        for (String arg : args) {
            if (arg.equals("--sorted")) {
                sorted = true;
            } else {
                ids.add(Integer.parseInt(arg));
            }
        }
        if (sorted) {
            Collections.sort(ids);
        }
        try (Connection conn = DriverManager.getConnection(System.getenv("JDBC_DATABASE_URL"))) {
            reserve(conn, ids);
        } catch (SQLException e) {
            System.err.println(e.getSQLState() + " " + e.getMessage());
            System.exit(1);
        }
    }
}
