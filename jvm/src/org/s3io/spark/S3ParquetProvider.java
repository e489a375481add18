package org.s3io.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;

/**
 * {@code format("s3parquet")} resolved on the JVM: Spark's own wrapper of the Python source (writes, streams and
 * schema inference unchanged) whose batch scans prune columns and hand filters to the Python reader.
 *
 * <p>Spark looks short names up among DataSourceRegister services before Python data sources, and calls
 * {@code setShortName("s3parquet")} on a PythonDataSourceV2 it finds there, so the Python source registered under
 * the same name is the one this wraps.
 */
public class S3ParquetProvider extends PythonDataSourceV2 implements DataSourceRegister {
  public static final String SHORT_NAME = "s3parquet";

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    Table table = super.getTable(schema, partitioning, properties);
    return new S3ParquetTable(this, table.name(), schema);
  }
}
