package org.s3io.spark;

import java.util.Arrays;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScan;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A batch scan of the pruned columns with the pushed filters; a stream is Spark's own Python scan of every
 * column (Spark prunes no streaming source).
 */
public class S3ParquetScan implements Scan {
  private final PythonDataSourceV2 source;
  private final String shortName;
  private final StructType schema;
  private final StructType readSchema;
  private final CaseInsensitiveStringMap options;
  private final Filter[] pushed;

  public S3ParquetScan(
      PythonDataSourceV2 source,
      String shortName,
      StructType schema,
      StructType readSchema,
      CaseInsensitiveStringMap options,
      Filter[] pushed) {
    this.source = source;
    this.shortName = shortName;
    this.schema = schema;
    this.readSchema = readSchema;
    this.options = options;
    this.pushed = pushed;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    return "S3ParquetScan ReadSchema: " + readSchema.catalogString() + ", PushedFilters: " + Arrays.toString(pushed);
  }

  @Override
  public Batch toBatch() {
    return new S3ParquetBatch(source, shortName, schema, readSchema, options, pushed);
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new PythonScan(source, shortName, schema, options, new Filter[0]).toMicroBatchStream(checkpointLocation);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return source.source().createPythonMetrics();
  }
}
